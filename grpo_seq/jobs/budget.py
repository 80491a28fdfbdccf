"""``GRPO_SEQ_QUICK=1``: every job (and evaluation) shrinks to a smoke test's budget.

How the examples of the README and the guides run in the test suite as they are written: the
commands stay the ones a user copies, and the environment variable caps what they cost. Set it
yourself to check that a command works before you spend its real budget. Unset (or ``0``):
nothing changes.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["QUICK_ENV", "quick", "shrink", "cap_env_steps", "record_frames"]

QUICK_ENV = "GRPO_SEQ_QUICK"
# per kind of job: the options capped, and their caps
_CAPS: dict[str, dict[str, int]] = {
    "env": {"total_env_steps": 2_000, "eval_every": 1_000, "eval_episodes": 2},
    "lm": {"max_steps": 1, "max_completion_length": 8, "num_generations": 2, "num_groups": 1, "eval_size": 2,
           "eval_max_new_tokens": 8},
    "eval_lm": {"max_new_tokens": 8, "limit": 2},  # limit 0 means every row: capped too
    "record": {"max_steps": 50},  # frames of a recorded episode: rendering and encoding cost most of a smoke run
}
# per kind of job: options turned off (an LM checkpoint's Adam state is twice the weights on disk)
_OFF: dict[str, tuple[str, ...]] = {"lm": ("save_optimizer",)}


def quick() -> bool:
    """Whether ``GRPO_SEQ_QUICK`` asks for smoke-test budgets."""
    return os.environ.get(QUICK_ENV, "").strip() not in ("", "0")


def shrink(spec: Any, kind: str | None = None) -> str | None:
    """Cap ``spec``'s budget in place when :func:`quick` (``kind``: the caps to use, default the
    spec's own ``KIND``); returns the line to tell the user, else None."""
    if not quick():
        return None
    kind = kind or getattr(spec, "KIND", "")
    caps = _CAPS.get(kind, {})
    for name in _OFF.get(kind, ()):
        setattr(spec, name, False)
    for name, cap in caps.items():
        value = getattr(spec, name)
        if name == "limit" and value == 0:
            setattr(spec, name, cap)
        elif not (name in ("eval_every", "eval_size") and value == 0):  # 0: no evaluations, which costs nothing
            setattr(spec, name, min(value, cap))
    shrunk = [f"{k} <= {v}" for k, v in caps.items()] + [f"no {name}" for name in _OFF.get(kind, ())]
    return f"{QUICK_ENV} is set: a smoke test's budget ({', '.join(shrunk)})"


def cap_env_steps(total: int) -> int:
    """An env budget given outside a spec (``GRPO.learn(total_timesteps)``), capped as :func:`shrink` does."""
    return min(total, _CAPS["env"]["total_env_steps"]) if quick() else total


def record_frames() -> int | None:
    """The most steps a recorded episode may play (None: the whole episode), as :func:`shrink` caps."""
    return _CAPS["record"]["max_steps"] if quick() else None
