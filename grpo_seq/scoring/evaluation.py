"""Greedy evaluation of an action policy on a vector of environments."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from ..policies.actor import make_actor
from ..sampling.env import make_vector_env

__all__ = ["PolicyEvaluator", "eval_stream_seed"]


def eval_stream_seed(run_seed: int) -> int:
    """The first reset seed of the evaluations of run ``run_seed``: ``10_000 + 1_000_000 * run_seed``.

    A run's evaluations take consecutive reset seeds from there (:class:`PolicyEvaluator`), so runs
    whose seeds differ get disjoint start states for their first 1,000,000 evaluated episodes: the
    runs of a benchmark are independent draws of their evaluations too. (Seeds ``10_000 + run_seed``
    gave runs 100 and 101 the same start states shifted by one episode, so every run of a seed
    range was lucky or unlucky on nearly the same starts.)
    """
    return 10_000 + 1_000_000 * run_seed


class PolicyEvaluator:
    """Runs ``num_episodes`` episodes at once, greedy unless ``greedy=False``, and returns their returns.

    The env is built once and reused; each call resets it with the next seed of its own
    stream, so evaluations neither touch nor depend on the training RNGs. A vector env seeded
    ``s`` resets its episode i with seed ``s + i``, so the stream steps by ``num_episodes``: each
    call plays start states no earlier call has played. (Stepping by 1 would share all but one
    with the call before: a run's evaluations would replay the same handful of starts, and the
    first evaluation past a threshold would say more about those starts than about the policy.)
    """

    def __init__(self, env_id: str, num_episodes: int = 10, seed: int = 10_000, env_kwargs: dict[str, Any] | None = None,
                 action_bins: int | None = None, action_clip: tuple[float, float] | None = None,
                 wrappers: Sequence[Any] = (), greedy: bool = True):
        if num_episodes < 1:
            raise ConfigError(f"PolicyEvaluator: num_episodes must be >= 1, got {num_episodes}")
        # as tokens (a continuous action cut as in training), or a UsageError naming the space
        self.envs, _ = make_vector_env(env_id, num_episodes, env_kwargs, action_bins, action_clip, wrappers)
        self.num_episodes, self.seed, self.greedy = num_episodes, seed, greedy
        spec = self.envs.spec
        self.max_steps = spec.max_episode_steps if spec and spec.max_episode_steps else 100_000

    @torch.no_grad()
    def __call__(self, policy: nn.Module, seed: int | None = None) -> np.ndarray:
        """Returns of ``num_episodes`` episodes, reset with seeds ``seed, seed + 1, ...`` (``seed``
        defaults to the next of the stream), the likeliest action taken at each step, or with
        ``greedy=False`` one sampled, drawn from generators seeded by ``seed``."""
        if seed is None:
            seed, self.seed = self.seed, self.seed + self.num_episodes
        self.last_seed = seed
        self._check_actions(policy)
        obs, _ = self.envs.reset(seed=seed)
        act = make_actor(policy, greedy=True) if self.greedy else make_actor(
            policy, np.random.default_rng(seed), torch.Generator().manual_seed(seed), greedy=False)
        returns = np.zeros(self.num_episodes)
        alive = np.ones(self.num_episodes, dtype=bool)
        for _ in range(self.max_steps):
            actions = act(obs)
            obs, reward, terminated, truncated, _ = self.envs.step(actions)
            returns += np.where(alive, reward, 0.0)
            alive &= ~(terminated | truncated)
            if not alive.any():
                break
        return returns

    def _check_actions(self, policy: nn.Module) -> None:
        """Refuse a policy that picks among other actions than this env's tokens (a continuous action
        cut into other ``action_bins`` than the policy was trained on would be read as wrong values)."""
        picks = getattr(policy, "init_kwargs", {}).get("num_actions")
        tokens = getattr(self.envs.single_action_space, "n", None)
        if picks is not None and tokens is not None and int(picks) != int(tokens):
            name = self.envs.spec.id if self.envs.spec else "the env"
            raise ConfigError(f"PolicyEvaluator: the policy picks among {picks} actions, but {name} as evaluated here "
                              f"has {tokens}; evaluate with the action_bins the policy was trained with")

    def close(self) -> None:
        self.envs.close()
