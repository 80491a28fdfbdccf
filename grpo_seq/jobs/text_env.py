"""Run a text-environment job (:class:`grpo_seq.jobs.text_env_spec.TextEnvJob`): a language model
plays G episodes per start state of a text environment (:mod:`grpo_seq.envs.text`) and learns
from the environment's per-turn rewards.

The run is the language-model program's (:mod:`grpo_seq.jobs.lm`: the same policy, trainer,
loop, checkpoints, resume, summary and progress bar) with a text-environment sampler in place of
the prompt sampler and the environment in place of the reward functions. Writes
<output_dir>/{config.json, metrics.jsonl, completions/step_XXXX.jsonl (whole conversations, each
message marked ``trained`` or not), summary.json, model/, checkpoints/}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from accelerate import Accelerator

from .budget import shrink
from ..loop.cpu_share import IdleCores
from ..envs.text import HELD_OUT_SEED, TextEnvGroupSampler, evaluate_text_env
from ..errors import ConfigError
from ..io.models import count_parameters, load_model_and_tokenizer
from ..policies import CausalLMPolicy
from ..io.serialization import atomic_write_text
from ..math.stats import paired_difference
from ..loop.trainer import GRPOLoop
from .callbacks import JobCallbacks, as_callbacks
from .lm import LMRun, _Starting, idle_cores, make_accelerator, open_run_dir, prepare_model, setup_process, train
from .text_env_spec import TextEnvJob

__all__ = ["TextEnvRun", "run_text_env_job", "build_text_env", "write_conversations", "env_slug", "HeldOutEval"]


class EnvRewards:
    """Stands where a language-model run has its reward functions: the environment pays."""

    names: list[str] = []

    def __str__(self) -> str:
        return "from the environment"


@dataclass
class TextEnvRun(LMRun):
    """A text-environment run's parts, ready for :func:`grpo_seq.jobs.lm.train`."""

    def describe(self) -> str:
        trainable, total = count_parameters(self.trainer.policy.model)
        sampler = self.trainer.sampler
        return (f"{self.spec.model}: {total / 1e6:.1f}M parameters, {trainable / 1e6:.2f}M trained; "
                f"{sampler.env_name}: {sampler.num_groups} start states x {sampler.num_generations} episodes a step, "
                f"at most {sampler.max_turns} turns")

    def write_completions(self, path: Path, batch: Any) -> str:
        return write_conversations(path, batch)


def env_slug(env_id: str | None) -> str:
    """A short name for run folders: ``textarena:GuessTheNumber-v0`` -> ``GuessTheNumber-v0``."""
    return (env_id or "env").split(":")[-1].replace("/", "-")


def build_text_env(cfg: TextEnvJob, model: torch.nn.Module, tokenizer: Any, accelerator: Accelerator,
                   env_fn: Callable | None = None, label: str = "text_env", cores: IdleCores | None = None) -> TextEnvRun:
    """The policy (LoRA with ``--use_peft``), the sampler and the trainer. ``GRPO_SEQ_QUICK``
    shrinks the spec's budget first (:mod:`grpo_seq.jobs.budget`)."""
    quick = shrink(cfg, "lm")
    if quick:
        cfg.eval_episodes = min(cfg.eval_episodes, 2)
    model = prepare_model(cfg, model)
    sampler = TextEnvGroupSampler(
        tokenizer, cfg.env_id, cfg.num_groups, cfg.num_generations, max_turns=cfg.max_turns,
        max_reply_tokens=cfg.max_completion_length, max_total_tokens=cfg.max_total_tokens,
        temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, seed=cfg.seed,
        process_index=accelerator.process_index, system_prompt=cfg.system_prompt, env_kwargs=cfg.env_options(),
        instruction=cfg.instruction,
        env_fn=env_fn, sampler_logprobs=cfg.sampler_correction is not None,
    )
    policy = CausalLMPolicy(model, tokenizer, sampling_dtype=cfg.sampling_dtype)
    trainer = GRPOLoop(cfg, policy, sampler, accelerator)
    if cfg.torch_threads != 0 or accelerator.device.type != "cpu":
        cores = None
    elif cores is None:
        cores = idle_cores()
    return TextEnvRun(cfg, trainer, EnvRewards(), accelerator, 0, label, quick=quick, cores=cores)  # type: ignore[arg-type]


def run_text_env_job(spec: TextEnvJob, callbacks: JobCallbacks | Sequence[JobCallbacks] | None = None,
                     env_fn: Callable | None = None, label: str = "text_env") -> dict:
    """Load, check, build and train one run from its spec; returns the summary. ``env_fn``: makes
    each environment, for one that is not registered (the spec's ``env_id`` then only names it).
    Changes the whole process, as a program does (:func:`grpo_seq.jobs.lm.run_lm_job`)."""
    cbs = as_callbacks(callbacks)
    try:
        open_run_dir(spec, cbs, f"{label}__{env_slug(spec.env_id)}")
        if spec.env_id is None and env_fn is None:
            raise ConfigError("--env_id: give a text environment (MyGame-v0, mypkg.games:MyGame-v0 or textarena:GAME)")
        setup_process(spec)
        accelerator = make_accelerator(spec)
        cbs.on_message(_Starting(accelerator, label), f"loading {spec.model}")
        cores = idle_cores()
        model, tokenizer = load_model_and_tokenizer(spec.model, spec.dtype, spec.trust_remote_code)
        run = build_text_env(spec, model, tokenizer, accelerator, env_fn, label, cores)
        return train(run, [HeldOutEval(spec), cbs] if spec.eval_episodes else cbs)
    finally:
        cbs.close()


class HeldOutEval(JobCallbacks):
    """Before the first step and after the last, on the main process: ``eval_episodes`` greedy
    episodes on held-out seeds (:func:`grpo_seq.envs.text.evaluate_text_env`). At the end both go
    into ``<output_dir>/eval_heldout/`` (``eval.json`` with the figures, ``before.jsonl`` and
    ``after.jsonl`` with the conversations) and the summary's ``heldout``. A resumed run's "before"
    is the model it resumed from."""

    def __init__(self, spec: TextEnvJob):
        self.spec = spec
        self.played: dict[str, tuple[dict[str, float], list[dict[str, Any]]]] = {}

    def _play(self, run: Any, when: str) -> None:
        self.played[when] = evaluate_text_env(run.trainer.policy, run.trainer.sampler, self.spec.eval_episodes)
        run.say(f"held-out episodes {when} training: {json.dumps(self.played[when][0])}")

    def on_start(self, run: Any) -> None:
        if run.is_main_process:
            self._play(run, "before")  # written at the end: the run folder is not this run's until its first step

    def on_end(self, run: Any, summary: dict[str, Any]) -> None:
        if not run.is_main_process:
            return
        if run.trainer.step_count:  # max_steps 0: the model before training alone
            self._play(run, "after")
        out = Path(self.spec.output_dir) / "eval_heldout"
        for when, (_, records) in self.played.items():
            atomic_write_text(out / f"{when}.jsonl", "".join(json.dumps(r) + "\n" for r in records))
        figures = {when: played[0] for when, played in self.played.items()}
        if "after" in self.played:
            figures["after_minus_before"] = _paired(self.played["before"][1], self.played["after"][1])
        atomic_write_text(out / "eval.json", json.dumps({"env_id": self.spec.env_id, "first_seed": HELD_OUT_SEED,
                                                         **figures}, indent=2))
        summary["heldout"] = figures
        if "after" not in self.played:
            return
        d = figures["after_minus_before"]
        run.say(f"held-out episodes, {len(self.played['after'][1])} seeds: {d['measure']} after minus before "
                f"{d['value']:+.3f} [{d['interval'][0]:+.3f}, {d['interval'][1]:+.3f}]"
                + ("" if d["interval"][0] > 0 else " (the interval holds 0: no gain shown)"))


def _paired(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any]:
    """Each seed's success (where the environment reports it for every episode), else its return,
    after minus before, with its 95% interval (:func:`grpo_seq.math.stats.paired_difference`)."""
    success = all(r["success"] is not None for r in before + after)
    key = "success" if success else "return"
    d = paired_difference([float(r[key]) for r in before], [float(r[key]) for r in after])
    return {"measure": key, **d}


def write_conversations(path: Path, batch: Any) -> str:
    """One JSON line per episode: its prompt, its messages (replies ``trained``, the environment's
    answers not, each reply with its turn's reward), return, advantage and whether it was truncated;
    returns the first episode, readable, for the console."""
    rows, G = [], batch.num_generations
    for i, messages in enumerate(batch.text.completions):
        rows.append({
            "group": i // G, "prompt": batch.text.prompts[i], "conversation": messages,
            "return": float(batch.rewards[i]),
            "advantage": float(batch.advantages[i][batch.mask[i]].mean()) if batch.mask[i].any() else 0.0,
            "truncated": bool(batch.truncated[i]),
        })
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
    first = rows[0]
    turns = "\n".join(f"{'A' if m['trained'] else 'E'}: {m['content']}" for m in first["conversation"])
    return f"P: {first['prompt']}\n{turns}\n   return {first['return']:.2f}, advantage {first['advantage']:+.2f}"
