"""The spec of a language model's training run in a text environment (:class:`TextEnvJob`);
:mod:`grpo_seq.jobs.text_env` runs it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import ConfigError, require
from .lm_spec import LMJob

__all__ = ["TextEnvJob"]

# The LM program's options that a text environment replaces (their unset values): its prompts and
# rewards come from the env.
_FROM_THE_ENV = {"dataset": None, "dataset_config": None, "prompt_column": None, "answer_column": None,
                 "reward_weights": None, "as_chat": False, "eval_dataset": None, "eval_dataset_config": None,
                 "eval_metric": None, "constant_baseline_items": 0,
                 "curriculum_threshold": None}


@dataclass
class TextEnvJob(LMJob):
    """A language model acting over several turns in a text environment: the LM program's options
    (model, G, groups, lengths, steps, LoRA, ...) with the environment, the turns and the lengths
    of a conversation. The prompts and the rewards come from the environment."""

    KIND: ClassVar[str] = "text_env"
    FIRST_OPTIONS: ClassVar[tuple[str, ...]] = ("model", "env_id", "max_steps", "eval_episodes", "use_peft",
                                                "output_dir", "resume_from")
    HAS_TURNS: ClassVar[bool] = True
    HELD_OUT_OPTIONS: ClassVar[str] = "--eval_episodes >= 1"

    env_id: str | None = field(
        default=None, metadata={"help": "The text environment: a gymnasium id (MyGame-v0; mypkg.games:MyGame-v0 imports "
                                "mypkg.games first, which registers it) or textarena:GAME for a single-player "
                                "TextArena game (extra textarena)."},
    )
    instruction: str = field(
        default="", metadata={"help": "Appended on a new line to the prompt and to every observation ('' for none): "
                              "a reminder of the reply's format at each turn."},
    )
    env_kwargs: str = field(default="{}", metadata={"help": "The environment's keyword arguments, a JSON object."})
    max_turns: int = field(default=8, metadata={"help": "Most replies per episode (an episode still going then is "
                                                "truncated)."})
    max_total_tokens: int = field(
        default=1024, metadata={"help": "Most tokens of a whole conversation, prompt included (an episode that "
                                "reaches it is truncated)."},
    )
    eval_episodes: int = field(
        default=0, metadata={"help": "Greedy episodes on held-out seeds (2**31 on: training never draws them) before and "
                             "after training, into <output_dir>/eval_heldout/ (0: none)."},
    )
    max_completion_length: int = field(default=64, metadata={"help": "Most new tokens per reply (a reply cut there "
                                                              "still goes to the environment)."})
    shuffle_prompts: bool = field(default=True, metadata={"help": "Not used: each group's start state comes from a "
                                                          "seeded reset."})

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self, "max_turns", self.max_turns >= 1, "must be >= 1")
        require(self, "max_total_tokens", self.max_total_tokens >= 2, "must be >= 2")
        require(self, "eval_episodes", self.eval_episodes >= 0, "must be >= 0")
        for name, unset in _FROM_THE_ENV.items():
            require(self, name, getattr(self, name) == unset, "a text environment's prompts and rewards come from the "
                    "environment; leave it unset")
        require(self, "reward_fns", not self.reward_fns, "a text environment's rewards come from the environment; "
                "leave it unset")
        self.env_options()

    @property
    def heldout(self) -> bool:
        """Whether the run plays held-out episodes before and after training."""
        return self.eval_episodes > 0

    def env_options(self) -> dict[str, Any]:
        """``env_kwargs`` as a dict (:class:`ConfigError` for anything but a JSON object)."""
        try:
            options = json.loads(self.env_kwargs)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--env_kwargs: not JSON ({e}), got {self.env_kwargs!r}") from None
        require(self, "env_kwargs", isinstance(options, dict), "must be a JSON object")
        return options
