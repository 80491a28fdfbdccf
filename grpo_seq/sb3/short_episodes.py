"""Groups per update for an env of short episodes, which no env family describes.

An env without a registered id takes CartPole's family: one group of two episodes per update,
measured on episodes of tens to hundreds of steps. Where an episode is a step or two (a contextual
bandit, a one-shot choice), such an update holds two or four env steps: an optimizer step on
almost nothing, and a run that spends its time between steps. Random play on a copy of the env
measures its episodes; where a group holds fewer than :data:`SHORT_ROLLOUT_STEPS` env steps,
an update takes as many groups as reach it. Where ``n_steps`` sizes the update instead, such an env
without a time limit is sized by the same measurement, not by the 1000-step cap its episodes are
cut at. A held-out one-step task with continuous actions
ended its budget closer to the optimum so, in a fraction of the time (the experiments page,
"One-step episodes: ...").
"""

from __future__ import annotations

import math
from typing import Any, Callable

import gymnasium as gym

from ..envs.defaults import IMAGES, UNREGISTERED

__all__ = ["SHORT_ROLLOUT_STEPS", "random_episode_length", "groups_for_short_episodes", "unregistered_sizing"]

SHORT_ROLLOUT_STEPS = 32  # the fewest env steps an update of an unregistered env takes, where episodes allow
PROBE_STEPS = 256  # random play's env steps to measure the episodes in


def random_episode_length(make: Callable[[], gym.Env], seed: int, steps: int = PROBE_STEPS) -> float | None:
    """The mean length of the episodes uniformly random actions end within ``steps`` env steps of
    an env from ``make`` (a fresh env or a copy: the user's own is never stepped); None where none
    ended, or where the env cannot be made and played so. An env that fails here (a space the
    door refuses further on, an env that cannot be copied) is left to fail where it would have
    without this measurement, with that place's message: the measurement only sizes a default."""
    lengths, t = [], 0
    try:
        env = make()
        try:
            env.action_space.seed(seed)
            env.reset(seed=seed)
            for _ in range(steps):
                t += 1
                _, _, terminated, truncated, _ = env.step(env.action_space.sample())
                if terminated or truncated:
                    lengths.append(t)
                    t = 0
                    env.reset()
        finally:
            env.close()
    except Exception:  # noqa: BLE001 (see the docstring: the default then stays the family's)
        return None
    return sum(lengths) / len(lengths) if lengths else None


def groups_for_short_episodes(mean_length: float, num_generations: int) -> int:
    """``ceil(SHORT_ROLLOUT_STEPS / (G * L))`` groups, at least 1, for episodes of mean length ``L``."""
    return max(1, math.ceil(SHORT_ROLLOUT_STEPS / (num_generations * mean_length)))


def unregistered_sizing(make: Callable[[], gym.Env], seed: int, sb3: dict[str, Any], ours: dict[str, Any], limit: int,
                        images: bool, has_limit: bool) -> tuple[int, int | None]:
    """For an env without an id: the episode length ``n_steps`` sizes groups by (``limit``, or without a
    time limit of its own the measured mean, rounded up), and the groups per update where neither
    ``n_steps`` nor ``num_groups`` is given and its family's are too few for :data:`SHORT_ROLLOUT_STEPS`
    (None: the family's stand). Random play runs only where one of them needs it."""
    if sb3["n_steps"] is not None:
        length = None if has_limit else random_episode_length(make, seed)
        return (limit if length is None else min(limit, max(1, math.ceil(length)))), None
    if "num_groups" in ours:
        return limit, None
    family = {**UNREGISTERED, **(IMAGES if images else {})}
    G = sb3["group_size"] or ours.get("num_generations", family["num_generations"])
    length = random_episode_length(make, seed)
    groups = groups_for_short_episodes(length, G) if length is not None else 0
    return limit, (groups if groups > family["num_groups"] else None)
