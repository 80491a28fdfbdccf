"""Whether an env's seeded resets give a group's members one start state.

A group's members start from the same state by being reset with the group's seed. Classic
control, Box2D, MuJoCo (``reset(seed=...)`` draws qpos/qvel noise from the seeded generator),
MinAtar and ALE (its sticky actions drawn from the seeded generator too) honour that. An env that
ignores the seed starts each member somewhere else, and the group's advantage then compares
episodes of different starts: a plain baseline over the group rather than GRPO's comparison from
one state. That is checked once, before training, on two of the sampler's fresh envs, and said.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["same_start", "check_same_starts"]

CHECK_SEED = 2_147_483_646  # any fixed seed: the check resets two fresh envs with it


def same_start(a: Any, b: Any) -> bool:
    """Observations equal, element for element (dicts and tuples of arrays included)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_start(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(same_start(x, y) for x, y in zip(a, b))
    return np.array_equal(np.asarray(a), np.asarray(b))


def check_same_starts(envs: list[gym.Env] | None, name: str) -> bool:
    """Reset the first two of ``envs`` (fresh ones; None: nothing to check) with one seed; warn,
    naming the env, when their observations differ."""
    if envs is None:
        return True
    a, _ = envs[0].reset(seed=CHECK_SEED)
    b, _ = envs[1].reset(seed=CHECK_SEED)
    if same_start(a, b):
        return True
    warnings.warn(f"{name}: two resets with the same seed gave different observations, so the members of a group do "
                  "not start from one state; each group's advantage then compares episodes from different starts (a "
                  "baseline over the group). Make reset(seed=...) decide the start state, or use "
                  "group_mode='alternatives' (every action tried from copies of one state)", stacklevel=3)
    return False
