"""``model.policy.get_distribution(obs)``: the policy's action distribution with the methods of
Stable-Baselines3's ``Distribution``, over the env's own actions.

A discrete action is one categorical; a ``MultiDiscrete``, ``MultiBinary`` or ``Box`` action one
categorical per dimension (a ``Box`` dimension's over its values, :mod:`grpo_seq.sampling.spaces`),
as SB3's ``MultiCategoricalDistribution``: ``log_prob`` is the sum of the dimensions' log-probs,
``entropy`` the sum of their entropies. A ``Box`` action given to ``log_prob`` counts as the nearest
of its dimension's values, so its log-prob is that value's probability, not a density.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.distributions import Categorical

from ..policies.mlp import action_digits, join_digits
from ..sampling.spaces import SpaceCodec

__all__ = ["ActionDistribution"]


class ActionDistribution:
    """The categoricals of ``logits`` ``(n, sum(nvec))`` (or ``(n, num_actions)`` where ``nvec`` is
    None), read and written as actions of ``codec``'s action space."""

    def __init__(self, logits: Tensor, nvec: Sequence[int] | None, codec: SpaceCodec):
        self.nvec, self.codec = list(nvec) if nvec else None, codec
        parts = logits.split(self.nvec, dim=-1) if self.nvec else [logits]
        # SB3's attribute: one torch Categorical, or a list of them (one per dimension)
        self.distribution: Categorical | list[Categorical] = [Categorical(logits=p) for p in parts]
        if self.nvec is None:
            self.distribution = self.distribution[0]

    def _parts(self) -> list[Categorical]:
        return self.distribution if isinstance(self.distribution, list) else [self.distribution]

    def _digits(self, actions: Any) -> Tensor:
        """``(n, dims)`` indices of the env's actions."""
        device = self._parts()[0].logits.device
        array = actions.detach().cpu().numpy() if isinstance(actions, Tensor) else np.asarray(actions)
        tokens = torch.as_tensor(self.codec.encode_actions(array), device=device)
        return torch.stack(action_digits(tokens, self.nvec or [self._parts()[0].logits.shape[-1]]), dim=1)

    def log_prob(self, actions: Any) -> Tensor:
        """``(n,)``: ``log pi(a | o)``, summed over an action's dimensions."""
        digits = self._digits(actions)
        return sum(part.log_prob(digits[:, i]) for i, part in enumerate(self._parts()))

    def entropy(self) -> Tensor:
        """``(n,)``: the sum of the dimensions' entropies."""
        return sum(part.entropy() for part in self._parts())

    def _as_actions(self, digits: list[Tensor]) -> Tensor:
        token = join_digits(digits, self.nvec) if self.nvec else digits[0]
        return torch.as_tensor(self.codec.decode_actions(token.cpu().numpy()))

    def sample(self) -> Tensor:
        """Actions drawn from the policy, in the env's form ``(n, *act_space.shape)``."""
        return self._as_actions([part.sample() for part in self._parts()])

    def mode(self) -> Tensor:
        """The likeliest value of each dimension (what ``predict(deterministic=True)`` takes)."""
        return self._as_actions([part.probs.argmax(-1) for part in self._parts()])

    def get_actions(self, deterministic: bool = False) -> Tensor:
        return self.mode() if deterministic else self.sample()
