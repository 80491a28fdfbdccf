"""The spec of an agent program's training run (:class:`AgentJob`); :mod:`grpo_seq.jobs.agent` runs it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import require
from .lm_spec import LMJob

__all__ = ["AgentJob"]

# The LM program's options that an agent program replaces (their unset values): its prompts are
# its own, its reward is what the rollout returns.
_FROM_THE_AGENT = {"prompt_column": None, "answer_column": None, "reward_weights": None, "eval_metric": None,
                   "system_prompt": "", "instruction": "", "as_chat": False, "constant_baseline_items": 0,
                   "curriculum_threshold": None}


@dataclass
class AgentJob(LMJob):
    """An agent program trained through the policy's OpenAI-compatible endpoint: the LM program's
    options (model, G, groups, steps, LoRA, ...) with the rollout function, the dataset of items
    it is given, and what each call and rollout may take. The prompts are the agent's own calls;
    the reward is what its rollout function returns."""

    KIND: ClassVar[str] = "agent"
    FIRST_OPTIONS: ClassVar[tuple[str, ...]] = ("model", "rollout", "dataset", "max_steps", "eval_dataset",
                                                "use_peft", "output_dir", "resume_from")
    HELD_OUT_OPTIONS: ClassVar[str] = "--eval_dataset (and --eval_size >= 1)"

    rollout: str | None = field(
        default=None, metadata={"help": "The agent: module:function of an async def rollout(client, item) -> float | "
                                "dict; client is an openai.AsyncOpenAI pointed at the policy, item a row of --dataset "
                                "(the working folder is importable). Or verifiers:TASKSET, a verifiers environment, "
                                "with --dataset verifiers:TASKSET (--dataset_config: its env config)."},
    )
    dataset: str | None = field(
        default=None, metadata={"aliases": ["--dataset_name"],
                                "help": "The items, one per rollout group: a .jsonl, .json, .parquet or .csv file, a "
                                "save_to_disk folder or a hub id; each row reaches the rollout as a dict."},
    )
    eval_dataset: str | None = field(
        default=None, metadata={"help": "Held-out items: the rollout runs once on each of the first --eval_size, its "
                                "calls decoded greedily, before and after training (eval_heldout/)."},
    )
    rollout_timeout: float = field(default=120.0, metadata={"help": "Seconds a rollout may run (one that runs longer "
                                                              "stops the run with a line naming it and its item)."})
    max_concurrency: int = field(default=0, metadata={"help": "Most rollouts running together (0: all of a step's, and as many in a held-out evaluation)."})
    max_completion_length: int = field(default=256, metadata={"help": "Most new tokens of one call (the default of a "
                                                               "call's max_tokens, and its limit)."})
    max_total_tokens: int = field(default=2048, metadata={"help": "Most tokens of one call, prompt and reply "
                                                         "together (a call that asks for more is refused)."})
    drop_failed_groups: bool = field(
        default=False, metadata={"help": "Keep going when a rollout fails: its group is dropped and another item drawn "
                                 "in its place (at most 3 times a step; agent/dropped_groups counts them). Off: the "
                                 "run stops with the failure's line."},
    )
    endpoint_port: int = field(default=0, metadata={"help": "The endpoint's port on 127.0.0.1 (0: any free port)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self, "rollout_timeout", self.rollout_timeout > 0, "must be > 0")
        require(self, "max_concurrency", self.max_concurrency >= 0, "must be >= 0")
        require(self, "max_total_tokens", self.max_total_tokens > self.max_completion_length,
                "must exceed --max_completion_length (room for a prompt)")
        require(self, "endpoint_port", 0 <= self.endpoint_port <= 65535, "must be a port, 0 to 65535")
        require(self, "rollout", self.rollout is None or ":" in self.rollout, "give module:function")
        require(self, "reward_fns", not self.reward_fns, "an agent's reward is what its rollout returns; leave it "
                "unset")
        for name, unset in _FROM_THE_AGENT.items():
            require(self, name, getattr(self, name) == unset, "an agent's prompts and rewards are its own; leave it "
                    "unset")
