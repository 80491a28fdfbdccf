"""The GroupSampler protocol: how G outputs per group are drawn."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from ..batch import RolloutBatch

__all__ = ["GroupSampler", "RandomStreams"]


@runtime_checkable
class GroupSampler(Protocol):
    """Draws ``num_groups`` groups of ``group_size`` outputs with the current policy.

    The members of a group share their prompt (or environment start state), so their rewards
    are comparable. ``sample`` runs without gradients and returns a :class:`RolloutBatch` laid
    out group by group, with ``rewards`` (and ``step_rewards`` where the task has them) filled
    in when the sampler itself knows the reward (an environment); otherwise the trainer's
    reward functions fill them.
    """

    num_groups: int
    group_size: int

    def sample(self, policy: nn.Module) -> RolloutBatch: ...


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
