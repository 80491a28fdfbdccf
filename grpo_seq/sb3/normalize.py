"""Stable-Baselines3's ``VecNormalize`` as the group sampler's observation transform.

SB3's on-policy algorithms see observations through the ``VecNormalize`` they train on, and its
running mean and variance move with every rollout (while ``training``). Here the sampler steps
its own envs, so the same statistics are applied to what it collects:
``o' = clip((o - mean) / sqrt(var + epsilon), -clip_obs, clip_obs)``, fixed within a rollout,
and each rollout's real observations update them afterwards. The user's ``VecNormalize`` holds
them throughout, so ``model.get_env()``, ``evaluate_policy``, ``EvalCallback``'s
synchronisation and ``VecNormalize.save`` see what the policy was trained on. Reward
normalisation (``norm_reward``) is not applied: a group's advantages are relative to its own
members, whatever the rewards' scale.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ObsNormalizer"]


class ObsNormalizer:
    """``vec_normalize``'s observation normalisation on flat observation batches ``(n, obs_dim)``."""

    def __init__(self, vec_normalize: Any):
        self.vec = vec_normalize

    def __call__(self, flat: np.ndarray) -> np.ndarray:
        v = self.vec
        mean, var = np.ravel(v.obs_rms.mean), np.ravel(v.obs_rms.var)
        return np.clip((flat - mean) / np.sqrt(var + v.epsilon), -v.clip_obs, v.clip_obs).astype(np.float32)

    def update(self, raw_flat: np.ndarray | None) -> None:
        """Move the running statistics by a rollout's real observations (while the env is ``training``)."""
        v = self.vec
        if raw_flat is not None and len(raw_flat) and v.training:
            v.obs_rms.update(raw_flat.reshape(len(raw_flat), *np.shape(v.obs_rms.mean)))
