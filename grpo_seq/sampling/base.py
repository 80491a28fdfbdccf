"""The GroupSampler protocol: how G outputs per group are drawn."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from ..math.batch import RolloutBatch

__all__ = ["GroupSampler", "Resumable", "EpisodeSampler", "Budgeted", "RandomStreams"]


@runtime_checkable
class GroupSampler(Protocol):
    """Draws ``num_groups`` groups of ``num_generations`` outputs with the current policy.

    The members of a group share their prompt (or environment start state), so their rewards
    are comparable. ``sample`` runs without gradients and returns a :class:`RolloutBatch` laid
    out group by group, with ``rewards`` (and ``step_rewards`` where the task has them) filled
    in when the sampler itself knows the reward (an environment); otherwise the trainer's
    reward functions fill them.
    """

    num_groups: int
    num_generations: int

    def sample(self, policy: nn.Module) -> RolloutBatch: ...


@runtime_checkable
class Resumable(Protocol):
    """A sampler whose position a checkpoint keeps: ``state_dict`` is JSON-able, and loading it
    makes the sampler draw what it would have drawn had the run never stopped."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class EpisodeSampler(Protocol):
    """A sampler of environment episodes, as the env job, the trainer's dynamic sampling and the
    Stable-Baselines3 door use it, beyond :class:`GroupSampler`.

    Attributes:
        num_envs: the episodes one ``sample`` plays on this process.
        env_steps: env steps taken so far on this process.
        last_episode_returns, last_episode_lengths: the env's own return and length of each
            episode of the last ``sample``.
        last_episode_cut: whether each of those episodes was cut short by the step budget.
        last_batch: what the last ``sample`` returned (None before the first).
    """

    num_groups: int
    num_generations: int
    num_envs: int
    env_steps: int
    last_episode_returns: list[float]
    last_episode_lengths: list[int]
    last_episode_cut: list[bool]
    last_batch: RolloutBatch | None

    def sample(self, policy: nn.Module) -> RolloutBatch: ...

    def close(self) -> None: ...


class ObsTransform(Protocol):
    """What an env sampler's policy sees of a batch of observations ``(n, obs_dim)`` (a running
    normalisation: fixed within a rollout), moved after each rollout by the env's own
    observations of its real steps."""

    def __call__(self, obs: np.ndarray) -> np.ndarray: ...

    def update(self, raw_obs: np.ndarray | None) -> None: ...


@runtime_checkable
class Budgeted(Protocol):
    """A sampler that keeps to a budget of env steps: ``step_budget`` is what this process may
    still take (None: unbounded). The env job sets it before each step, the sampler cuts episodes
    (as truncated) to stay within it, and dynamic sampling's redraws spend it."""

    step_budget: int | None


class RandomStreams:
    """Checkpointing for an env sampler whose randomness is ``rng`` (start states), ``action_rng``
    and ``torch_gen`` (actions), with its ``env_steps`` counter: ``state_dict`` is JSON-able."""

    rng: np.random.Generator
    action_rng: np.random.Generator
    torch_gen: torch.Generator
    env_steps: int

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "action_rng": self.action_rng.bit_generator.state,
                "torch_gen": self.torch_gen.get_state().tolist(), "env_steps": self.env_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.action_rng.bit_generator.state = state["action_rng"]
        self.torch_gen.set_state(torch.tensor(state["torch_gen"], dtype=torch.uint8))
        self.env_steps = int(state["env_steps"])
