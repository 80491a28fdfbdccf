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
    """``vec_normalize``'s observation normalisation on flat observation batches ``(n, obs_dim)``;
    over a Dict (``obs_space``), each key it normalises (``norm_obs_keys``) on that key's slice of
    the flat observation, the other parts as they are."""

    def __init__(self, vec_normalize: Any, obs_space: Any = None):
        self.vec = vec_normalize
        self.slices = _key_slices(obs_space, vec_normalize.obs_rms) if isinstance(vec_normalize.obs_rms, dict) else None

    def __call__(self, flat: np.ndarray) -> np.ndarray:
        v = self.vec
        if self.slices is None:
            return _normalized(flat, v.obs_rms, v).astype(np.float32)
        out = np.array(flat, dtype=np.float32)
        for key, part in self.slices.items():
            out[..., part] = _normalized(flat[..., part], v.obs_rms[key], v)
        return out

    def update(self, raw_flat: np.ndarray | None) -> None:
        """Move the running statistics by a rollout's real observations (while the env is ``training``)."""
        v = self.vec
        if raw_flat is None or not len(raw_flat) or not v.training:
            return
        if self.slices is None:
            v.obs_rms.update(raw_flat.reshape(len(raw_flat), *np.shape(v.obs_rms.mean)))
            return
        for key, part in self.slices.items():
            v.obs_rms[key].update(raw_flat[:, part].reshape(len(raw_flat), *np.shape(v.obs_rms[key].mean)))


def _normalized(x: np.ndarray, rms: Any, v: Any) -> np.ndarray:
    """``clip((x - mean) / sqrt(var + epsilon), -clip_obs, clip_obs)``, the statistics flattened as ``x`` is."""
    return np.clip((x - np.ravel(rms.mean)) / np.sqrt(np.ravel(rms.var) + v.epsilon), -v.clip_obs, v.clip_obs)


def _key_slices(space: Any, rms: dict[str, Any]) -> dict[str, slice]:
    """Where each normalised key's part lies in a Dict observation flattened part after part."""
    from ..sampling.spaces import SpaceCodec

    slices, start = {}, 0
    for key, part in space.spaces.items():
        size = SpaceCodec.obs_size(part, key)
        if key in rms:
            slices[key] = slice(start, start + size)
        start += size
    return slices
