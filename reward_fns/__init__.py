"""Reward functions: plain callables ``fn(prompts, completions, **columns) -> list[float | None]``.

Environment rollouts carry their own reward (the env's per-step rewards and episode return,
filled in by :class:`grpo_seq.EnvGroupSampler`), so this package holds the reward functions
that score text. It is an ordinary importable package: a reward function is named by its short
name in :data:`REGISTRY` or by its import path (``reward_fns.gsm8k:format_reward``), and
a user's own module works the same way (see :func:`grpo_seq.scoring.rewards.load_reward_fn`, which
resolves short names only from the registry its caller passes: the recipes pass this one).

:data:`REGISTRY` maps short names to ready-to-use functions. :func:`overlong_penalty` is not in
it: it is a factory that needs ``max_length`` and ``buffer``, so a recipe builds it
(``overlong_penalty(max_length=512, buffer=64)``) and passes the result. Nor is
``reward_fns.reasoning_gym.task_score``, the factory of one reasoning-gym task's reward;
``reward_fns.reasoning_gym:score`` scores the rows of any task by import path.

``math_correctness`` (``reward_fns.math_answer:math_correctness``) checks answers with
math-verify and ``reward_fns.reasoning_gym`` scores with reasoning-gym: both packages are
optional extras (``math``, ``reasoning``), imported only when a function is called; neither is
a short name, so the short names stay GSM8K's.
"""

from typing import Callable

from ._text import completion_text
from .gsm8k import (
    GSM8K_INSTRUCTION, GSM8K_SYSTEM_PROMPT, correctness_reward, extract_answer, format_reward, has_answer_line,
    normalize_number, overlong_penalty,
)
from .math_answer import math_correctness

__all__ = [
    "REGISTRY", "GSM8K_SYSTEM_PROMPT", "GSM8K_INSTRUCTION", "completion_text", "correctness_reward", "extract_answer",
    "format_reward", "has_answer_line", "math_correctness", "normalize_number", "overlong_penalty",
]

REGISTRY: dict[str, Callable] = {
    "correctness": correctness_reward,
    "format": format_reward,
}
