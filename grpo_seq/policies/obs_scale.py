"""Observation divisors for an env's policy: CartPole's termination thresholds, or what random
play reaches (:func:`rollout_obs_scale`).

The same rule as ``recipes/cartpole.py``'s ``default_obs_scale`` (which may import it from here),
taking an env object as well as an id, for the Stable-Baselines3-style ``GRPO`` surface.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

__all__ = ["default_obs_scale", "rollout_obs_scale"]


def default_obs_scale(env: gym.Env | str) -> list[float] | None:
    """``[x_threshold, 1, theta_threshold, 1]`` for a CartPole-like env, else None (no scaling).

    Adam moves every weight by about the learning rate, so a pole angle spanning only +-0.21 rad
    needs weights 10x larger than a cart position in +-2.4 m before it steers the policy;
    in threshold units both count alike (docs/experiments.md, "Observation units").
    """
    owned = isinstance(env, str)
    base = (gym.make(env) if owned else env).unwrapped
    try:
        if hasattr(base, "x_threshold") and hasattr(base, "theta_threshold_radians"):
            return [float(base.x_threshold), 1.0, float(base.theta_threshold_radians), 1.0]
        return None
    finally:
        if owned:
            base.close()


def rollout_obs_scale(env: gym.Env | str, steps: int = 2_000, seed: int = 0) -> list[float]:
    """Per-dimension ``max |observation|`` over ``steps`` steps of uniformly random actions (episodes
    reset as they end, the first with ``seed``): observations in the units a starting policy meets
    them, for an env whose bounds say nothing useful (infinite, or far wider than what happens).
    A dimension that stayed 0 gets 1 (no scaling).

    MountainCar's velocity, for one, spans about +-0.015 under random actions: unscaled, the
    policy's first layer barely sees it, and Adam moves its weights no faster than the others.
    """
    owned = isinstance(env, str)
    env = gym.make(env) if owned else env
    rng = np.random.default_rng(seed)
    try:
        obs, _ = env.reset(seed=seed)
        peak = np.abs(np.asarray(obs, dtype=np.float64))
        for _ in range(steps):
            obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            peak = np.maximum(peak, np.abs(np.asarray(obs, dtype=np.float64)))
            if terminated or truncated:
                obs, _ = env.reset()
        return [float(x) if x > 1e-6 else 1.0 for x in peak]
    finally:
        if owned:
            env.close()
