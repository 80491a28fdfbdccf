"""Greedy evaluation of an action policy on a vector of environments."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from .sampling.env import make_vector_env

__all__ = ["PolicyEvaluator"]


class PolicyEvaluator:
    """Runs ``num_episodes`` greedy episodes at once and returns their returns.

    The env is built once and reused; each call resets it with the next seed of its own
    stream, so evaluations neither touch nor depend on the training RNGs.
    """

    def __init__(self, env_id: str, num_episodes: int = 10, seed: int = 10_000, env_kwargs: dict[str, Any] | None = None):
        self.envs, _ = make_vector_env(env_id, num_episodes, env_kwargs)
        self.num_episodes, self.seed = num_episodes, seed
        spec = self.envs.spec
        self.max_steps = spec.max_episode_steps if spec and spec.max_episode_steps else 100_000

    @torch.no_grad()
    def __call__(self, policy: nn.Module) -> np.ndarray:
        obs, _ = self.envs.reset(seed=self.seed)
        self.seed += 1
        returns = np.zeros(self.num_episodes)
        alive = np.ones(self.num_episodes, dtype=bool)
        for _ in range(self.max_steps):
            actions = policy.act(torch.as_tensor(obs, dtype=torch.float32), greedy=True).numpy()
            obs, reward, terminated, truncated, _ = self.envs.step(actions)
            returns += np.where(alive, reward, 0.0)
            alive &= ~(terminated | truncated)
            if not alive.any():
                break
        return returns

    def close(self) -> None:
        self.envs.close()
