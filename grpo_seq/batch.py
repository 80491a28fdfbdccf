"""The one batch type that flows through the loop, for text and environment rollouts alike."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

__all__ = ["RolloutBatch"]


@dataclass
class RolloutBatch:
    """B = num_groups * G sampled outputs, laid out group by group (members of group g are
    rows ``g*G .. g*G+G-1``); T is the longest completion in the batch.

    The trainer reads only ``tokens``, ``mask``, the rewards and ``group``; the policy that
    scores the batch reads ``context`` (and ``extras``), so the same trainer trains text or
    actions.

    Attributes:
        context: what the policy conditions on. Env rollouts: observations ``(B, T, obs_dim)``,
            the context of action t being observation t. Text: prompt ids ``(B, P)``.
        tokens: ``(B, T)`` long, the tokens (actions) the policy chose.
        mask: ``(B, T)`` bool, True where a token belongs to the output; padding, post-EOS
            and post-termination positions are False and never count.
        group: ``(B,)`` long, index of the group (prompt or start state) of each output.
        group_size: G, outputs per group.
        rewards: ``(B,)`` outcome reward of each output.
        step_rewards: ``(B, T)`` reward of each step, for process supervision, or None.
        old_logp: ``(B, T)`` log-probs under the sampling policy (kept for mu > 1), or None; NaN
            on outputs the trainer skips (zero advantage with beta = 0: never trained).
        ref_logp: ``(B, T)`` log-probs under the reference policy (for beta > 0), or None.
        advantages: ``(B, T)`` per-token advantages once computed, or None.
        extras: anything else the policy or reward functions need (attention masks, texts).
    """

    context: Tensor
    tokens: Tensor
    mask: Tensor
    group: Tensor
    group_size: int
    rewards: Tensor
    step_rewards: Tensor | None = None
    old_logp: Tensor | None = None
    ref_logp: Tensor | None = None
    advantages: Tensor | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        b = self.tokens.shape[0]
        if self.mask.shape != self.tokens.shape:
            raise ValueError(f"mask {tuple(self.mask.shape)} must match tokens {tuple(self.tokens.shape)}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 to compare outputs, got {self.group_size}")
        if b % self.group_size:
            raise ValueError(f"batch of {b} outputs is not divisible by group_size {self.group_size}")

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def num_groups(self) -> int:
        return self.batch_size // self.group_size

    @property
    def num_tokens(self) -> int:
        return int(self.mask.sum())

    def lengths(self) -> Tensor:
        return self.mask.sum(-1)

    def select(self, index: Tensor) -> "RolloutBatch":
        """Rows ``index`` of every per-output tensor (a minibatch); group layout is not kept."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor) and v.dim() > 0 and v.shape[0] == self.batch_size:
                v = v[index]
            elif f.name == "extras":
                v = {k: (x[index] if isinstance(x, Tensor) and x.shape[:1] == (self.batch_size,) else x) for k, x in v.items()}
            out[f.name] = v
        sub = object.__new__(RolloutBatch)  # skip the divisibility check: a minibatch need not hold whole groups
        sub.__dict__.update(out)
        return sub

    def to(self, device: torch.device | str) -> "RolloutBatch":
        if self.tokens.device == torch.device(device):
            return self
        moved = {
            f.name: getattr(self, f.name).to(device)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        moved["extras"] = {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in self.extras.items()}
        return dataclasses.replace(self, **moved)
