"""Default observation divisors for an env: CartPole's in units of its termination thresholds.

The same rule as ``recipes/cartpole.py``'s ``default_obs_scale`` (which may import it from here),
taking an env object as well as an id, for the Stable-Baselines3-style ``GRPO`` surface.
"""

from __future__ import annotations

import gymnasium as gym

__all__ = ["default_obs_scale"]


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
