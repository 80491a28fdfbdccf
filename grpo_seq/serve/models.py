"""The service's models: a finished job's model recorded in the store (:func:`register`), and
loaded once for inference, then kept, the most recently used ``--max_loaded_models`` of them
(:class:`ModelCache`)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from .requests import RequestError, finite_or_none
from .store import MODEL_NAME, Store

__all__ = ["register", "ModelCache", "summary_of"]

_SUMMARY_KEYS = ("solved", "solved_env_steps", "final_eval_return", "best_eval_return", "env_steps", "iterations",
                 "seconds", "reward_mean", "steps")


def register(store: Store, record: dict[str, Any]) -> dict[str, Any]:
    """Record the model of the finished job ``record`` under its model name. An env job's model is
    its best evaluated policy (``policy_best/``) where it kept one, else its final ``policy/``."""
    run = store.run_dir(record["id"])
    # an agent job trains a language model: its model is served as an lm job's is
    kind = "env" if record["kind"] == "env" else "lm"
    entry: dict[str, Any] = {"name": record["model_name"], "kind": kind, "job": record["id"],
                             "created": time.time()}
    if kind == "env":
        path = run / "policy_best" if (run / "policy_best").is_dir() else run / "policy"
        kwargs = json.loads((path / "policy.json").read_text())["kwargs"]
        entry.update(env_id=record["spec"]["env_id"], obs_dim=kwargs["obs_dim"], num_actions=kwargs["num_actions"],
                     action_bins=record["spec"].get("action_bins"), action_clip=record["spec"].get("action_clip"))
    else:
        path = run / "model"
        entry.update(base_model=record["spec"].get("model"))
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    entry.update(path=str(path), summary={k: finite_or_none(summary[k]) for k in _SUMMARY_KEYS if k in summary})
    store.write_model(entry)
    return entry


def summary_of(entry: dict[str, Any]) -> dict[str, Any]:
    """What GET /models shows of a model."""
    return {k: entry.get(k) for k in ("name", "kind", "job", "env_id", "obs_dim", "num_actions", "base_model",
                                       "summary", "created") if entry.get(k) is not None}


class _EnvModel:
    """Greedy actions as the env takes them: a token decoded (a continuous action's values, a
    multi-dimensional action's digits) where the env's actions are not ``Discrete``."""

    def __init__(self, entry: dict[str, Any]):
        from ..jobs.env import env_codec, load_actor

        self.obs_dim, self.act = load_actor(entry["path"], greedy=True)  # a numpy snapshot: no torch per request
        self.codec = env_codec(entry["env_id"], entry.get("action_bins"), entry.get("action_clip"))

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        tokens = self.act(obs)
        return tokens if self.codec is None else self.codec.decode_actions(tokens)


class _LMModel:
    def __init__(self, path: str):
        from ..io.models import load_model_and_tokenizer

        self.model, self.tokenizer = load_model_and_tokenizer(path)
        self.lock = threading.Lock()  # one generate at a time per model

    def complete(self, prompt: str, max_new_tokens: int) -> str:
        import torch

        enc = self.tokenizer(prompt, return_tensors="pt")
        n, context = enc["input_ids"].shape[1], getattr(self.model.config, "max_position_embeddings", None)
        if context is not None and n + max_new_tokens > context:  # positions past the context: no answer, held lock
            raise RequestError(400, f"prompt: {n:,} tokens, and {max_new_tokens} new ones would pass this model's "
                               f"context of {context:,} tokens; shorten the prompt or ask for fewer new tokens")
        with self.lock, torch.no_grad():
            out = self.model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                      pad_token_id=self.tokenizer.pad_token_id)
            return self.tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)

    def chat(self, prompt: list[int], n: int, max_new_tokens: int,
             sampling: dict[str, Any]) -> list[tuple[list[int], bool]]:
        """``n`` completions of the prompt ids, greedy or as ``sampling`` says (``do_sample``,
        ``temperature``, ``top_p``): each its ids up to its first end-of-turn token, and whether it
        ended there. The prompt and ``max_new_tokens`` must fit the context (checked here, before
        the lock)."""
        import torch

        context = getattr(self.model.config, "max_position_embeddings", None)
        if context is not None and len(prompt) + max_new_tokens > context:
            raise RequestError(400, f"messages: {len(prompt):,} tokens, and max_tokens {max_new_tokens} would pass "
                               f"this model's context of {context:,} tokens; send fewer or ask for fewer tokens")
        eos = self.tokenizer.eos_token_id
        ids = torch.tensor([prompt])
        with self.lock, torch.no_grad():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                      num_return_sequences=n, pad_token_id=self.tokenizer.pad_token_id,
                                      eos_token_id=eos, **sampling)
        rows = []
        for row in out[:, len(prompt):].tolist():
            k = row.index(eos) + 1 if eos in row else len(row)
            rows.append((row[:k], eos in row))
        return rows


class ModelCache:
    """Models by name, each loaded on its first request and kept until its record changes (a
    resumed job registers a newer model under the same name), or until ``max_loaded`` others
    have been used since (the least recently used is let go: a language model's weights are
    memory)."""

    def __init__(self, store: Store, max_loaded: int = 4):
        self.store, self.max_loaded = store, max_loaded
        self.lock = threading.Lock()
        # name -> (its record's mtime, the record's path, model), least recently used first
        self.loaded: OrderedDict[str, tuple[float, str, Any]] = OrderedDict()

    def _stamp(self, name: Any) -> float:
        """The modification time of ``name``'s record; 404 for a name the store lacks."""
        if not isinstance(name, str) or not MODEL_NAME.fullmatch(name):
            raise RequestError(400, "model_name: give the name of a model (GET /models lists them)")
        try:
            return self.store.model_path(name).stat().st_mtime
        except FileNotFoundError:
            raise RequestError(404, f"model_name {name!r}: no such model (GET /models lists them)") from None

    def cached(self, name: Any) -> tuple[dict[str, Any], Any] | None:
        """The loaded model ``name`` when it is current, else None (load it with :meth:`get`). Asked
        on every inference request: one stat of a path kept as a string, no path built."""
        hit = self.loaded.get(name) if isinstance(name, str) else None
        if hit is None:
            return None
        try:
            if os.stat(hit[1]).st_mtime != hit[0]:
                return None
            self.loaded.move_to_end(name)
        except (OSError, KeyError):  # the record is gone (get() says so), or let go meanwhile
            return None
        return hit[2]

    def get(self, name: Any) -> tuple[dict[str, Any], Any]:
        """The model ``name``'s record and its loaded model, loading it when it is not current."""
        stamp = self._stamp(name)
        with self.lock:
            hit = self.loaded.get(name)
            if hit is None or hit[0] != stamp:
                entry = self.store.model(name)
                if entry is None:
                    raise RequestError(404, f"model_name {name!r}: no such model (GET /models lists them)")
                if not os.path.isdir(entry["path"]):  # its job's folder removed by hand since
                    raise RequestError(410, f"model_name {name!r}: its files ({entry['path']}) are gone; train it "
                                       "again, or resume its job if that folder is back")
                model = _EnvModel(entry) if entry["kind"] == "env" else _LMModel(entry["path"])
                hit = self.loaded[name] = (stamp, str(self.store.model_path(name)), (entry, model))
            self.loaded.move_to_end(name)
            while len(self.loaded) > self.max_loaded:
                self.loaded.popitem(last=False)
        return hit[2]
