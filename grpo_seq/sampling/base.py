"""The GroupSampler protocol: how G outputs per group are drawn."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import nn

from ..batch import RolloutBatch

__all__ = ["GroupSampler"]


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
