"""Request bodies to job specs and observations, every refusal a :class:`RequestError`: an HTTP
status and one line naming the culprit. A train request's options are the job spec's own,
checked by the same :func:`grpo_seq.jobs.spec_from_dict` as a spec file's; the Stable-Baselines3
service's names (``env_name``, ``total_timesteps``, ``model_name``) are accepted beside ours."""

from __future__ import annotations

import ast
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import UsageError
from ..sampling.spaces import ACTION_BINS
from ..jobs.spec import spec_from_dict
from .config import ServeConfig
from .store import AGENTS, Store, check_model_name

__all__ = ["RequestError", "parse_json", "train_spec", "resume_spec", "observations", "ALIASES"]

# the SB3 service's names -> ours
ALIASES = {"env_name": "env_id", "total_timesteps": "total_env_steps"}
# the service chooses where a job writes and whether it resumes; a body may not
SERVER_CHOSEN = ("output_dir", "resume_from", "overwrite", "trust_remote_code")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


class RequestError(Exception):
    """A refused request: ``status`` and a one-line reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, " ".join(reason.split())


def parse_json(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object, else 400."""
    try:
        data = json.loads(raw, object_pairs_hook=_once_each)
        _no_nul(data, "")
    except ValueError as e:
        raise RequestError(400, f"the body is not JSON ({e})") from None
    except RecursionError:
        raise RequestError(400, "the body nests deeper than Python's JSON reader follows") from None
    if not isinstance(data, dict):
        raise RequestError(400, f"the body must be a JSON object, got {type(data).__name__}")
    return data


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different (a repeated key would silently keep the last)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise RequestError(400, f"the body gives {key!r} twice")
        data[key] = value
    return data


def _no_nul(value: Any, where: str) -> None:
    """Refuse a NUL character in any string of the body: no path, name or text holds one."""
    if isinstance(value, str):
        if "\x00" in value:
            raise RequestError(400, f"{where or 'the body'}: holds a NUL character")
    elif isinstance(value, dict):
        for k, v in value.items():
            _no_nul(k, where or "a key")
            _no_nul(v, f"{where}.{k}" if where else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _no_nul(v, f"{where}[{i}]")


def _options(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with the SB3 names translated (both names given: refused) and no server-chosen key."""
    options = dict(body)
    for theirs, ours in ALIASES.items():
        if theirs in options:
            if ours in options:
                raise RequestError(400, f"give {theirs!r} or {ours!r}, not both")
            options[ours] = options.pop(theirs)
    chosen = sorted(set(options) & set(SERVER_CHOSEN))
    if chosen:
        raise RequestError(400, f"{chosen}: the service chooses these (each job writes into its own folder of the store)")
    if options.get("report_to"):
        raise RequestError(400, "report_to: the service does not send metrics elsewhere; read GET /jobs/{id}/metrics")
    return options


def train_spec(body: Mapping[str, Any], store: Store, cfg: ServeConfig) -> tuple[Any, str | None]:
    """The job spec a ``POST /train`` body asks for, checked, and its model name (None: the job id)."""
    options = _options(body)
    name = options.pop("model_name", None)
    if name is not None:
        try:
            check_model_name(name)
        except ValueError as e:
            raise RequestError(400, str(e)) from None
    kind = options.setdefault("kind", "lm" if "dataset" in options else "env")
    if kind == "env":
        _check_env(options, cfg)
    elif kind == "lm":
        _check_lm(options, store, cfg)
    elif kind == "agent":
        _check_agent(options, store, cfg)
    else:  # each kind names files and code of its own: the service checks only these three
        raise RequestError(400, f"kind {kind!r}: this service runs 'env', 'lm' and 'agent' jobs")
    try:
        spec = spec_from_dict(options, source="POST /train")
    except UsageError as e:
        raise RequestError(400, str(e)) from None
    check_resources(spec, cfg)
    return spec, name


def check_resources(spec: Any, cfg: ServeConfig) -> None:
    """The bounds the machine's owner set (:class:`ServeConfig`), on the spec as it will run (its
    defaults filled in): outputs a step, the policy's size, completion length, checkpoints,
    threads and evaluation episodes. A job over one is refused before it starts (400)."""
    outputs = spec.num_generations * spec.num_groups
    if outputs > cfg.max_outputs_per_step:
        raise RequestError(400, f"num_generations x num_groups: at most {cfg.max_outputs_per_step:,} outputs a step on "
                           f"this service (--max_outputs_per_step), got {spec.num_generations} x {spec.num_groups}")
    if not spec.save_total_limit or spec.save_total_limit > cfg.max_checkpoints:
        raise RequestError(400, f"save_total_limit: 1 to {cfg.max_checkpoints} checkpoints kept on this service "
                           f"(--max_checkpoints), got {spec.save_total_limit}")
    if 0 < spec.save_steps < cfg.min_save_steps:
        raise RequestError(400, f"save_steps: 0 (no checkpoints) or at least {cfg.min_save_steps} steps between them "
                           f"on this service (--min_save_steps), got {spec.save_steps}")
    cores = os.cpu_count() or 1
    if spec.torch_threads > cores:
        raise RequestError(400, f"torch_threads: at most this machine's {cores} cores, got {spec.torch_threads}")
    if spec.KIND == "env":
        _check_env_sizes(spec, cfg)
    elif spec.max_completion_length > cfg.max_new_tokens:
        raise RequestError(400, f"max_completion_length: at most {cfg.max_new_tokens} on this service (--max_new_tokens), "
                           f"got {spec.max_completion_length}")


def _check_env_sizes(spec: Any, cfg: ServeConfig) -> None:
    """The policy network's parameters (an MLP from the env's flattened observation to its action
    logits) and an evaluation's episodes."""
    import gymnasium as gym

    if spec.eval_episodes > cfg.max_eval_episodes:
        raise RequestError(400, f"eval_episodes: at most {cfg.max_eval_episodes:,} on this service "
                           f"(--max_eval_episodes), got {spec.eval_episodes:,}")
    env = gym.make(spec.env_id)
    try:
        outputs = gym.spaces.flatdim(env.action_space)
        if isinstance(env.action_space, gym.spaces.Box) and getattr(spec, "action_head", None) != "gaussian":
            outputs *= spec.action_bins or ACTION_BINS  # one logit per value of each dimension (a Gaussian: a mean each)
        widths = [gym.spaces.flatdim(env.observation_space), *spec.hidden_sizes, outputs]
    finally:
        env.close()
    params = sum((a + 1) * b for a, b in zip(widths, widths[1:]))
    if params > cfg.max_policy_params:
        raise RequestError(400, f"hidden_sizes {spec.hidden_sizes}: a policy of {params:,} parameters, over the "
                           f"{cfg.max_policy_params:,} of this service (--max_policy_params)")


def _check_budget(options: Mapping[str, Any], name: str, shown: str, most: int) -> None:
    value = options.get(name)
    if isinstance(value, int) and not isinstance(value, bool) and value > most:
        raise RequestError(400, f"{shown}: at most {most:,} on this service (--{'max_env_steps' if name == 'total_env_steps' else 'max_lm_steps'}), got {value:,}")


def _check_env(options: dict[str, Any], cfg: ServeConfig) -> None:
    """A registered gymnasium env whose actions have a token form (an import path ``module:Env``
    would import code named by the request: refused), and a budget within bounds. An id of a
    package that registers its envs on import (MinAtar, ALE, MiniGrid) is registered first."""
    import gymnasium as gym

    from ..jobs.env import check_spaces, is_registered

    env_id = options.setdefault("env_id", "CartPole-v1")
    # is_registered imports only the packages that register ids (MinAtar, ALE, MiniGrid); module:Env would import any
    if not isinstance(env_id, str) or ":" in env_id or not is_registered(env_id):
        raise RequestError(400, f"env_name {env_id!r}: not a registered gymnasium env (e.g. CartPole-v1, Acrobot-v1)")
    _check_budget(options, "total_env_steps", "total_timesteps", cfg.max_env_steps)
    try:
        env = gym.make(env_id)
    except Exception as e:  # a registered env whose dependency is missing (Box2D, MuJoCo)
        raise RequestError(400, f"env_name {env_id!r}: cannot be made here ({' '.join(str(e).split())})") from None
    try:
        check_spaces(env, env_id)
    except UsageError as e:
        raise RequestError(400, f"env_name {env_id!r}: {e}") from None
    finally:
        env.close()


def _check_lm(options: dict[str, Any], store: Store, cfg: ServeConfig) -> None:
    """A dataset inside the store's data/, a model from the store (a model name, a folder under
    it) or a hub id, reward functions by name (``reward_fns``' short names or its import paths)."""
    if "reward_fns" in options and "reward_funcs" in options:
        raise RequestError(400, "give 'reward_fns' or 'reward_funcs' (TRL's name), not both")
    _check_budget(options, "max_steps", "max_steps", cfg.max_lm_steps)
    _store_dataset(options, "dataset", store)
    options["model"] = _lm_model(options.get("model"), store)
    fns = options.get("reward_fns", options.pop("reward_funcs", None))
    if isinstance(fns, str):
        fns = [fns]
    if not isinstance(fns, list) or not fns:
        raise RequestError(400, "reward_fns: give a list of reward function names")
    from reward_fns import REGISTRY

    for fn in fns:
        if not isinstance(fn, str) or not (fn in REGISTRY or _reward_function(fn)):
            raise RequestError(400, f"reward_fns: {fn!r} is not a reward function of this service; give one of "
                               f"{sorted(REGISTRY)} or an import path inside reward_fns (reward_fns.module:function)")
    options["reward_fns"] = fns


def _store_dataset(options: dict[str, Any], name: str, store: Store) -> None:
    """``options[name]``, a file or folder inside the store's data/, as its full path."""
    value = options.get(name)
    found = store.inside(value, "data") if isinstance(value, str) and value else None
    if found is None or not found.exists() or found == store.inside("", "data"):
        raise RequestError(400, f"{name} {value!r}: give a file or folder inside the store's data/ folder "
                           f"({store.root / 'data'}), by its path relative to it")
    options[name] = str(found)


def _check_agent(options: dict[str, Any], store: Store, cfg: ServeConfig) -> None:
    """An agent of the store's agents/ folder (``module:function``, ``async def function`` in
    ``agents/module.py``, put there by the service's owner: a request names code, never sends it),
    its items (and held-out items) inside data/, a language model as for an ``lm`` job."""
    _check_budget(options, "max_steps", "max_steps", cfg.max_lm_steps)
    if options.get("endpoint_port"):
        raise RequestError(400, "endpoint_port: the service chooses the endpoint's port (any free one on 127.0.0.1)")
    rollout = options.get("rollout")
    module, _, name = rollout.partition(":") if isinstance(rollout, str) else ("", "", "")
    source = store.inside(f"{module}.py", AGENTS) if re.fullmatch(r"\w+", module) and name.isidentifier() else None
    if source is None or not source.is_file() or not _defines_async(source, name):
        raise RequestError(400, f"rollout {rollout!r}: not an agent of this service; give module:function, an "
                           f"async def function in a module of the store's {AGENTS}/ folder ({store.root / AGENTS})")
    _store_dataset(options, "dataset", store)
    if options.get("eval_dataset") is not None:
        _store_dataset(options, "eval_dataset", store)
    options["model"] = _lm_model(options.get("model"), store)


def _defines_async(source: Path, name: str) -> bool:
    """Whether the module file ``source`` defines ``async def name`` at its top level (read, not imported)."""
    try:
        tree = ast.parse(source.read_text())
    except (SyntaxError, ValueError, OSError):
        return False
    return any(isinstance(node, ast.AsyncFunctionDef) and node.name == name for node in tree.body)


def _reward_function(path: str) -> bool:
    """Whether ``path`` names a function of the service's ``reward_fns`` package
    (``reward_fns.module:function``; a module, a class or a constant there is not one)."""
    import importlib

    if not re.fullmatch(r"reward_fns(\.\w+)*:\w+", path):
        return False
    module, name = path.split(":")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return False
    return callable(found) and not isinstance(found, type)


def _lm_model(model: Any, store: Store) -> str:
    if not isinstance(model, str) or not model:
        raise RequestError(400, "model: give a language model: a model name of this service, a folder inside the "
                           "store, or a hub id")
    known = store.model(model) if "/" not in model else None
    if known is not None and known.get("kind") == "lm":
        return known["path"]
    inside = store.inside(model)
    if inside is not None and (inside / "config.json").is_file():  # a folder save_pretrained wrote
        return str(inside)
    if HUB_ID.fullmatch(model) and not Path(model).exists() and ".." not in model:
        return model
    raise RequestError(400, f"model {model!r}: not a language model of this service, a folder inside the store "
                       "or a hub id")


def resume_spec(spec: Any, body: Mapping[str, Any], run_dir: Path, cfg: ServeConfig) -> Any:
    """``spec`` resumed from ``run_dir`` with a larger budget (``total_timesteps`` or
    ``total_env_steps`` for an env job, ``max_steps`` for a language model)."""
    options = _options(body)
    budget = "total_env_steps" if spec.KIND == "env" else "max_steps"
    extra = sorted(set(options) - {budget})
    if extra or budget not in options:
        raise RequestError(400, f"resume: give only the new budget, {budget!r}{f'; not {extra}' if extra else ''}")
    _check_budget(options, budget, budget, cfg.max_env_steps if budget == "total_env_steps" else cfg.max_lm_steps)
    old = getattr(spec, budget)
    new = options[budget]
    if not isinstance(new, int) or isinstance(new, bool) or new <= old:
        raise RequestError(400, f"{budget}: a resumed job needs a budget larger than its {old:,}, got {new!r}")
    data = {**spec.to_dict(), budget: new, "resume_from": str(run_dir), "output_dir": str(run_dir)}
    try:
        return spec_from_dict(data, source="POST /jobs/{id}/resume")
    except UsageError as e:
        raise RequestError(400, str(e)) from None


def observations(body: Mapping[str, Any], obs_dim: int, max_batch: int) -> tuple[np.ndarray, bool]:
    """The observation(s) of an inference body as float32 rows, and whether it was a single one:
    every row ``obs_dim`` finite numbers, at most ``max_batch`` rows."""
    obs = body.get("observation", body.get("observations"))
    if not isinstance(obs, list) or not obs:
        raise RequestError(400, "observation: give a list of numbers, or a list of such lists (a batch)")
    single = not isinstance(obs[0], list)
    if not single and len(obs) > max_batch:
        raise RequestError(413, f"observation: at most {max_batch} in a batch (--max_batch), got {len(obs)}")
    for row in [obs] if single else obs:
        bad = next((x for x in row if not _is_number(x)), None) if isinstance(row, list) else row
        if bad is not None:  # numpy would read "1.5" and true as numbers
            raise RequestError(400, f"observation: every value must be a JSON number, got {json.dumps(bad)[:40]}")
    try:
        array = np.asarray([obs] if single else obs, dtype=np.float32)
    except (ValueError, TypeError):
        raise RequestError(400, f"observation: every row must be {obs_dim} numbers") from None
    if array.ndim != 2 or array.shape[1] != obs_dim:
        got = array.shape[-1] if array.ndim == 2 else "rows of unequal or nested length"
        raise RequestError(400, f"observation: this model takes {obs_dim} numbers per observation, got {got}")
    if not np.isfinite(array).all():
        raise RequestError(400, "observation: holds NaN or infinity")
    return array, single


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def finite_or_none(x: Any) -> Any:
    """A float that JSON can carry (NaN and infinity as None)."""
    return x if not isinstance(x, float) or math.isfinite(x) else None
