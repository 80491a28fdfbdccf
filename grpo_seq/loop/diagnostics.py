"""Noticing a run that cannot learn (groups whose members all earned the same reward) or that
has diverged (weights that grew by orders of magnitude in one optimizer step).

GRPO learns only from differences within a group. When every member of a group earns the same
reward (every episode times out at the same return, every answer is wrong), the group's
advantages are exactly 0 and it trains nothing. A run where that holds for most groups, step
after step, is not learning, however long it goes on; :class:`SignalWatch` says so, once, with
the usual ways out. A group whose members all did the very same thing (:func:`identical_groups`)
is not such a group: the policy has settled there, as a solved task's does, and its tie says
nothing about whether different attempts would be told apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch
from torch import Tensor

from ..math.advantages import all_equal, equal_reward_groups

__all__ = ["SignalWatch", "identical_groups", "NO_SIGNAL_FIXES", "weight_norm", "weight_growth", "WEIGHT_RMS_FLOOR"]

# The smallest root-mean-square weight that weight_growth measures growth from.
WEIGHT_RMS_FLOOR = 1e-2

NO_SIGNAL_FIXES = (
    "a larger group (--num_generations), an exploration bonus that breaks ties between members "
    "(--exploration_bonus, environments), a shaped reward that tells better from worse attempts, "
    "or easier prompts or start states"
)


def identical_groups(tokens: Tensor, mask: Tensor, num_generations: int) -> Tensor:
    """``(groups,)`` bool: whether every member of a group produced the same output as its first,
    the same tokens at the same masked positions (``tokens`` and ``mask`` ``(B, T)``, groups of
    ``num_generations`` consecutive rows)."""
    G, T = num_generations, tokens.shape[-1]
    tokens, mask = tokens.reshape(-1, G, T), mask.reshape(-1, G, T)
    same = ((tokens == tokens[:, :1]) | ~mask).all(-1) & (mask == mask[:, :1]).all(-1)
    return same.all(-1)


@dataclass
class SignalWatch:
    """Counts the steps in a row where at least ``threshold`` of the groups were flat (all
    rewards equal, and below the best reward seen); after ``patience`` such steps
    :meth:`update` returns a message, once.

    Attributes:
        patience: flat steps in a row before the run is called not learning.
        threshold: fraction of flat groups that makes a step flat.
    """

    patience: int = 10
    threshold: float = 0.9
    flat_in_a_row: int = 0
    flat_total: int = 0
    message: str | None = None

    best: float | None = None
    ever_differed: bool = False

    def update(self, grouped_rewards: list[list[float]], identical: list[bool] | None = None) -> str | None:
        """Record one step's rewards, one list per group; returns the message the first time the
        run has been flat for ``patience`` steps in a row, else None. ``identical``: per group,
        whether its members all produced the same output (such a group is never counted stuck)."""
        # float64 holds every float a caller passes (the trainer's float32 rewards too) exactly
        rewards = torch.tensor(grouped_rewards, dtype=torch.float64)
        flat = equal_reward_groups(rewards).tolist()
        identical = identical or [False] * len(grouped_rewards)
        flat_values = [g[0] for g, is_flat, same in zip(grouped_rewards, flat, identical) if is_flat and not same]
        self.ever_differed = self.ever_differed or not bool(all_equal(rewards, None, (0, 1)))
        top = float(rewards.max())
        self.best = top if self.best is None else max(self.best, top)
        stuck = [v for v in flat_values if not self.ever_differed or v < self.best]
        if len(stuck) >= self.threshold * len(grouped_rewards):
            self.flat_in_a_row += 1
            self.flat_total += 1
        else:
            self.flat_in_a_row = 0
        if self.message is None and self.flat_in_a_row >= self.patience:
            self.message = (
                f"no learning signal: for {self.flat_in_a_row} steps in a row at least {self.threshold:.0%} of the "
                "groups gave every member the same reward, below the best seen, so their advantages are 0 and "
                f"nothing was trained. Likely fixes: {NO_SIGNAL_FIXES}"
            )
            return self.message
        return None


def weight_norm(tensors: Iterable[Tensor]) -> float:
    """The global L2 norm of ``tensors``, ``||theta|| = sqrt(sum_i theta_i^2)``, as a Python float.

    Each tensor's norm is taken in its own dtype (one pass, no copy); when that overflows (a weight
    of 1e20 squares past float32's range) the norms are taken again in float64, so a diverged
    policy's norm is a number, not inf. Weights that hold inf or NaN give inf or NaN."""
    tensors = [t.detach() for t in tensors]
    norms = torch._foreach_norm(tensors)
    total = float(torch.linalg.vector_norm(torch.stack([n.double().to(norms[0].device) for n in norms])))
    if math.isfinite(total):
        return total
    norms = [torch.linalg.vector_norm(t, dtype=torch.float64).to(tensors[0].device) for t in tensors]
    return float(torch.linalg.vector_norm(torch.stack(norms)))


def weight_growth(norm_before: float, norm_after: float, num_weights: int, rms_floor: float = WEIGHT_RMS_FLOOR) -> float:
    """How many times larger the weights' global norm is after an optimizer step than before it:

        growth = ||theta_after|| / max(||theta_before||, rms_floor * sqrt(n))

    for ``n`` weights. The floor (a root-mean-square weight of ``rms_floor``, about a default
    initialisation's) lets a policy that starts at or near zero take its first steps: measured
    from zero, any step would be an infinite growth. A healthy step changes the norm by a few
    percent (growth near 1); a learning rate orders of magnitude too high multiplies it by about
    ``lr / rms(theta)`` in Adam's first step. NaN after the step gives NaN."""
    return norm_after / max(norm_before, rms_floor * math.sqrt(num_weights))
