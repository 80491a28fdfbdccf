"""Groups that start from a state an earlier rollout visited, not only from a reset.

A group started at reset shares only its first state: by step ``t`` its members stand in
different states, so comparing their returns-to-go at step ``t`` mixes what the actions at ``t``
did with where each member already was. A group started at a visited state ``s_k`` (a copy of
the env as it stood there, time limit included) compares its members from ``s_k`` on: the first
action's advantage is a Monte Carlo comparison at one state, and the steps after it stay close.
It is GRPO's own estimator, a group baseline at a shared state, taken at states inside episodes
as well as at their start (VinePPO, Kazemnejad et al. 2024, estimates values the same way).

:class:`StateReservoir` keeps the states to branch from: ``size`` states drawn uniformly from
every step a rollout takes (Vitter's reservoir sampling, algorithm R), so a rollout of ``N``
steps deep-copies the env about ``size * (1 + ln(N / size))`` times, not ``N``.
"""

from __future__ import annotations

import random
from typing import Any

import gymnasium as gym
import numpy as np

from . import snapshot

__all__ = ["StateReservoir", "clone_env"]


def clone_env(env: gym.Env) -> gym.Env:
    """A copy of ``env`` as it stands (:func:`grpo_seq.sampling.snapshot.clone_env`), to branch a group from."""
    return snapshot.clone_env(env, "branch groups from a visited state", "use --branch_prob 0")


class StateReservoir:
    """``size`` (env copy, observation) pairs drawn uniformly from the states offered since
    :meth:`clear`: the ``i``-th state offered is kept with probability ``size / i``."""

    def __init__(self, size: int, seed: int):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size, self.rng = size, random.Random(seed)
        self.clear()

    def clear(self) -> None:
        self.seen = 0
        self.kept: list[tuple[gym.Env, np.ndarray]] = []

    def offer(self, env: gym.Env, obs: np.ndarray) -> None:
        """Consider the state ``env`` stands in now (``obs``: its observation), before it is stepped."""
        self.seen += 1
        if len(self.kept) < self.size:
            self.kept.append((clone_env(env), np.array(obs, copy=True)))
            return
        j = self.rng.randrange(self.seen)
        if j < self.size:
            self.kept[j] = (clone_env(env), np.array(obs, copy=True))

    def take(self) -> list[tuple[gym.Env, np.ndarray]]:
        """The kept states, and an empty reservoir for the next rollout."""
        kept = self.kept
        self.clear()
        return kept

    def state_dict(self) -> dict[str, Any]:
        """The draw's random state (JSON-able); the kept env copies are not saved, so a resumed run's
        first step starts its groups at reset."""
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
