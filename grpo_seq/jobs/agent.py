"""Run an agent job (:class:`grpo_seq.jobs.agent_spec.AgentJob`): the user's agent program, written
against the ``openai`` package, trained unchanged through the policy's endpoint
(:mod:`grpo_seq.agents`).

The run is the language-model program's (:mod:`grpo_seq.jobs.lm`: the same policy, trainer, loop,
checkpoints, resume, summary and progress bar) with the agent sampler in place of the prompt
sampler and the rollout's return in place of reward functions. Before the model loads, the
rollout function is imported and the dataset read, so that a wrong path costs seconds. Writes
<output_dir>/{config.json, metrics.jsonl (agent/* figures), completions/step_XXXX.jsonl (each
rollout's conversation, replies marked ``trained``), summary.json, eval_heldout/, model/,
checkpoints/}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from accelerate import Accelerator

from ..agents.endpoint import Limits
from ..agents.evaluation import evaluate_agent
from ..agents.rollout_fn import load_rollout
from ..agents.sampler import AgentGroupSampler
from ..errors import ConfigError, UsageError
from ..io.models import count_parameters, load_model_and_tokenizer
from ..io.prompt_data import read_rows
from ..io.serialization import atomic_write_text
from ..loop.cpu_share import IdleCores
from ..loop.trainer import GRPOLoop
from ..scoring.heldout import compare, majority_answer, summary_line
from ..policies import CausalLMPolicy
from .agent_spec import AgentJob
from .budget import shrink
from .callbacks import JobCallbacks, as_callbacks
from .lm import (LMRun, _Starting, dataset_name, idle_cores, make_accelerator, open_run_dir, prepare_model,
                 setup_process, train)
from .text_env import write_conversations

__all__ = ["AgentRun", "run_agent_job", "build_agent", "AgentHeldOutEval"]


class RolloutRewards:
    """Stands where a language-model run has its reward functions: the rollout returns the reward."""

    names: list[str] = []

    def __str__(self) -> str:
        return "returned by the rollout"


@dataclass
class AgentRun(LMRun):
    """An agent run's parts, ready for :func:`grpo_seq.jobs.lm.train`."""

    def describe(self) -> str:
        trainable, total = count_parameters(self.trainer.policy.model)
        sampler = self.trainer.sampler
        return (f"{self.spec.model}: {total / 1e6:.1f}M parameters, {trainable / 1e6:.2f}M trained; "
                f"{self.num_prompts} items, {sampler.num_groups} x {sampler.num_generations} rollouts of "
                f"{sampler.rollout_name} a step; endpoint {sampler.server.url}/rollouts/<id>/v1")

    def write_completions(self, path: Path, batch: Any) -> str:
        return write_conversations(path, batch)


def _agents_extra() -> None:
    """Refuse the run, in one line, where the agents extra is not installed."""
    missing = []
    for name in ("openai", "fastapi", "uvicorn"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise UsageError(f"an agent run needs {', '.join(missing)}: pip install 'grpo-seq[agents]'")


def load_items(spec: AgentJob) -> tuple[Any, Any]:
    """The training items and the held-out ones (or None), read and checked now."""
    if spec.dataset is None:
        raise ConfigError("--dataset: give the items, a .jsonl/.json/.parquet/.csv file, a save_to_disk folder or a "
                          "hub id (each row reaches the rollout as a dict)")
    rows = read_rows(spec.dataset, spec.dataset_split, spec.dataset_config)
    if not rows:
        raise ConfigError(f"--dataset {spec.dataset}: holds no items")
    held = None
    if spec.heldout:
        held = read_rows(spec.eval_dataset, spec.eval_dataset_split, spec.eval_dataset_config)[: spec.eval_size]
        if not held:
            raise ConfigError(f"--eval_dataset {spec.eval_dataset}: holds no items")
    return rows, held


def build_agent(cfg: AgentJob, rows: Any, rollout: Callable[..., Any], model: Any, tokenizer: Any,
                accelerator: Accelerator, label: str = "agent", cores: IdleCores | None = None) -> AgentRun:
    """The policy (LoRA with ``--use_peft``), the sampler with its endpoint serving, the trainer.
    ``GRPO_SEQ_QUICK`` shrinks the spec's budget first (:mod:`grpo_seq.jobs.budget`)."""
    quick = shrink(cfg, "lm")
    model = prepare_model(cfg, model)
    limits = Limits(cfg.max_completion_length, cfg.max_total_tokens, cfg.temperature, cfg.top_p, cfg.top_k)
    sampler = AgentGroupSampler(
        tokenizer, rows, rollout, cfg.rollout, cfg.num_groups, cfg.num_generations, cfg.model, limits,
        port=cfg.endpoint_port, timeout=cfg.rollout_timeout, max_concurrency=cfg.max_concurrency, seed=cfg.seed,
        process_index=accelerator.process_index, shuffle=cfg.shuffle_prompts, drop_failed_groups=cfg.drop_failed_groups,
    )
    policy = CausalLMPolicy(model, tokenizer, sampling_dtype=cfg.sampling_dtype)
    try:
        trainer = GRPOLoop(cfg, policy, sampler, accelerator)
    except BaseException:
        sampler.close()
        raise
    if cfg.torch_threads != 0 or accelerator.device.type != "cpu":
        cores = None
    elif cores is None:
        cores = idle_cores()
    rewards: Any = RolloutRewards()  # where an LM run has its reward scorer
    return AgentRun(cfg, trainer, rewards, accelerator, len(rows), label, quick=quick, cores=cores)


def run_agent_job(spec: AgentJob, callbacks: JobCallbacks | Sequence[JobCallbacks] | None = None,
                  rollout: Callable[..., Any] | None = None, label: str = "agent") -> dict:
    """Check, load, build and train one run from its spec; returns the summary. ``rollout``: the
    function itself, for one no import path names (the spec's ``rollout`` then only names it).
    Changes the whole process, as a program does (:func:`grpo_seq.jobs.lm.run_lm_job`)."""
    cbs = as_callbacks(callbacks)
    run = None
    try:
        open_run_dir(spec, cbs, f"{label}__{dataset_name(spec.dataset)}")
        if spec.rollout is None:
            raise ConfigError("--rollout: give the agent, module:function of an async def rollout(client, item)")
        _agents_extra()
        fn = rollout if rollout is not None else load_rollout(spec.rollout, config=spec.dataset_config)
        rows, held = load_items(spec)
        setup_process(spec)
        accelerator = make_accelerator(spec)
        cbs.on_message(_Starting(accelerator, label), f"loading {spec.model}")
        cores = idle_cores()
        model, tokenizer = load_model_and_tokenizer(spec.model, spec.dtype, spec.trust_remote_code)
        run = build_agent(spec, rows, fn, model, tokenizer, accelerator, label, cores)
        held = held[: spec.eval_size] if held else held  # as GRPO_SEQ_QUICK left the budget
        return train(run, [AgentHeldOutEval(spec, held), cbs] if held else cbs)
    finally:
        if run is not None:
            run.trainer.sampler.close()
        cbs.close()


class AgentHeldOutEval(JobCallbacks):
    """Before the first step and after the last, on the main process: the rollout once per held-out
    item, greedy (:func:`grpo_seq.agents.evaluation.evaluate_agent`). At the end both go into
    ``<output_dir>/eval_heldout/`` (``eval.json``: the mean reward and calls, and the LM programs'
    figures on the rewards: each side's score with its interval, the paired difference, and where
    the items have an ``answer`` the majority answer's score; ``before.jsonl`` and ``after.jsonl``
    with each item's conversation) and the summary's ``heldout``; one line sums it up."""

    def __init__(self, spec: AgentJob, items: Any):
        self.spec, self.items = spec, items
        self.played: dict[str, tuple[dict[str, float], list[dict[str, Any]]]] = {}

    def _play(self, run: Any, when: str) -> None:
        self.played[when] = evaluate_agent(run.trainer.policy, run.trainer.sampler, self.items)
        run.say(f"held-out rollouts {when} training: {json.dumps(self.played[when][0])}")

    def on_start(self, run: Any) -> None:
        if run.is_main_process:
            self._play(run, "before")

    def on_end(self, run: Any, summary: dict[str, Any]) -> None:
        if not run.is_main_process:
            return
        if run.trainer.step_count:
            self._play(run, "after")
        out = Path(self.spec.output_dir) / "eval_heldout"
        for when, (_, records) in self.played.items():
            atomic_write_text(out / f"{when}.jsonl", "".join(json.dumps(r) + "\n" for r in records))
        figures: dict[str, Any] = {when: played[0] for when, played in self.played.items()}
        rewards = {when: [r["reward"] for r in played[1]] for when, played in self.played.items()}
        # the LM programs' figures on the same items: intervals, the paired difference, the majority answer
        figures.update(metric="reward", **compare(rewards["before"], rewards.get("after"), majority_answer(self.items)))
        atomic_write_text(out / "eval.json", json.dumps({"rollout": self.spec.rollout, **figures}, indent=2))
        summary["heldout"] = figures
        run.say(summary_line(figures))
