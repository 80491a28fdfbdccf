"""Observation divisors (and offsets) for an env's policy: CartPole's termination thresholds, or
what random play reaches (:func:`rollout_obs_scale`, :func:`rollout_obs_center`).

The same rule as ``recipes/cartpole.py``'s ``default_obs_scale`` (which may import it from here),
taking an env object as well as an id, for the Stable-Baselines3-style ``GRPO`` surface.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

__all__ = ["default_obs_scale", "rollout_obs_center", "rollout_obs_range", "rollout_obs_scale", "rollout_obs_units"]


def default_obs_scale(env: gym.Env | str) -> list[float] | None:
    """``[x_threshold, 1, theta_threshold, 1]`` for a CartPole-like env (once per frame of a frame
    stack), else None (no scaling); None too where a wrapper made the observation something else
    than whole frames of those four (a time feature added: random play's units then).

    Adam moves every weight by about the learning rate, so a pole angle spanning only +-0.21 rad
    needs weights 10x larger than a cart position in +-2.4 m before it steers the policy;
    in threshold units both count alike (docs/experiments.md, "Observation units").
    """
    owned = isinstance(env, str)
    outer = gym.make(env) if owned else env
    base = outer.unwrapped
    try:
        if hasattr(base, "x_threshold") and hasattr(base, "theta_threshold_radians"):
            units = [float(base.x_threshold), 1.0, float(base.theta_threshold_radians), 1.0]
            stacked, rest = divmod(int(np.prod(outer.observation_space.shape)), len(units))  # a frame stack: per frame
            return units * stacked if stacked and not rest else None
        return None
    finally:
        if owned:
            base.close()


def rollout_obs_range(env: gym.Env | str, steps: int = 2_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension ``(low, high)`` of the observations met over ``steps`` steps of uniformly random
    actions (episodes reset as they end, the first with ``seed``): what a starting policy sees."""
    owned = isinstance(env, str)
    env = gym.make(env) if owned else env
    rng = np.random.default_rng(seed)
    try:
        obs, _ = env.reset(seed=seed)
        low = high = np.asarray(obs, dtype=np.float64)
        for _ in range(steps):
            obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            obs = np.asarray(obs, dtype=np.float64)
            low, high = np.minimum(low, obs), np.maximum(high, obs)
            if terminated or truncated:
                obs, _ = env.reset()
        return low, high
    finally:
        if owned:
            env.close()


def rollout_obs_scale(env: gym.Env | str, steps: int = 2_000, seed: int = 0) -> list[float]:
    """Per-dimension ``max |observation|`` over :func:`rollout_obs_range`'s random play: observations
    in the units a starting policy meets them, for an env whose bounds say nothing useful
    (infinite, or far wider than what happens). A dimension that stayed 0 gets 1 (no scaling).

    MountainCar's velocity, for one, spans about +-0.015 under random actions: unscaled, the
    policy's first layer barely sees it, and Adam moves its weights no faster than the others.
    """
    low, high = rollout_obs_range(env, steps, seed)
    return [float(x) if x > 1e-6 else 1.0 for x in np.maximum(np.abs(low), np.abs(high))]


def rollout_obs_center(env: gym.Env | str, steps: int = 2_000, seed: int = 0) -> tuple[list[float], list[float]]:
    """``(shift, scale)`` mapping :func:`rollout_obs_range`'s box onto [-1, 1]:
    ``shift = (high + low) / 2``, ``scale = (high - low) / 2`` (1 where a dimension never moved).

    For a policy's ``obs_shift`` and ``obs_scale``: MountainCar's positions under random play span
    -0.70..-0.33, so divided by their largest magnitude the start states (-0.6..-0.4) fill only a
    band 0.29 wide, all of one sign; centred, they spread about 4x as wide around 0, where the
    starting choice of direction (which depends on the start position) is learned.
    """
    low, high = rollout_obs_range(env, steps, seed)
    half = (high - low) / 2
    return [float(x) for x in (high + low) / 2], [float(x) if x > 1e-6 else 1.0 for x in half]


def rollout_obs_units(env: gym.Env | str, center: bool, seed: int = 0) -> tuple[list[float] | None, list[float]]:
    """A policy's ``(obs_shift, obs_scale)`` from random play: :func:`rollout_obs_center`'s with
    ``center``, else no shift and :func:`rollout_obs_scale`'s divisors."""
    if center:
        return rollout_obs_center(env, seed=seed)
    return None, rollout_obs_scale(env, seed=seed)
