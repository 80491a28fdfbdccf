"""The log-probs a step needs besides the trained policy's own: the reference's (pi_ref, for the KL
term) and the sampling policy's (pi_old, for the clipped ratio), and the advantages built on them."""

from __future__ import annotations

import copy
import dataclasses
from typing import Sequence

import torch
from accelerate import Accelerator
from torch import Tensor, nn

from ..math.advantages import compute_advantages, kl_penalised_rewards
from ..math.batch import RolloutBatch
from .config import LoopConfig
from ..math.objective import kl_estimate
from .reference import mix_reference

__all__ = ["Scoring"]


class Scoring:
    """The reference policy and the no-gradient scoring passes of a run.

    No reference at all with beta = 0: nothing to load, nothing to run. A LoRA policy is its own
    reference with the adapters disabled (``ref_is_base``): no second copy in memory."""

    def __init__(self, config: LoopConfig, accelerator: Accelerator, policy: nn.Module):
        self.config, self.accelerator = config, accelerator
        self.ref_policy: nn.Module | None = None
        self.ref_is_base = config.beta > 0 and getattr(policy, "has_adapters", False)
        if self.ref_is_base and config.ref_sync_steps:
            raise ValueError(
                "LoopConfig.ref_sync_steps: a LoRA policy's reference is its base model with the adapters "
                "disabled and cannot move toward the policy; set ref_sync_steps=0"
            )
        if config.beta > 0 and not self.ref_is_base:
            self.ref_policy = copy.deepcopy(policy).requires_grad_(False).eval().to(accelerator.device)

    @torch.no_grad()
    def score(self, policy: nn.Module, batch: RolloutBatch, rows: Tensor | None = None) -> Tensor:
        """Log-probs ``(B, T)`` of the batch's tokens under ``policy``, in micro-batches, no gradients;
        with ``rows`` (a bool mask over outputs) only those are scored and the others hold NaN."""
        micro = self.config.micro_batch_size or batch.batch_size
        idx = torch.arange(batch.batch_size, device=batch.tokens.device)
        out = torch.full(batch.tokens.shape, float("nan"), device=batch.tokens.device)
        for c in (idx if rows is None else idx[rows]).split(micro):
            out[c] = policy(batch.select(c), with_entropy=False)[0].float()
        return out

    def score_ref(self, policy: nn.Module, batch: RolloutBatch) -> None:
        """``batch.ref_logp`` under the reference (beta > 0)."""
        with self.accelerator.autocast():
            if self.ref_policy is not None:
                batch.ref_logp = self.score(self.ref_policy, batch)
            elif self.ref_is_base:
                with policy.adapters_disabled():
                    batch.ref_logp = self.score(policy, batch)

    def score_old(self, policy: nn.Module, batch: RolloutBatch, live: Tensor) -> None:
        """``batch.old_logp`` under the sampling policy when it will be updated more than once; with
        one update pi_old is pi_theta, and its log-probs are the current ones, detached, at no cost."""
        if self.config.reuses_batch and batch.old_logp is None:
            with self.accelerator.autocast():
                batch.old_logp = self.score(policy, batch, rows=live)

    def advantages(self, policy: nn.Module, batch: RolloutBatch, weights: Sequence[float] | None) -> Tensor:
        """:func:`grpo_seq.math.advantages.compute_advantages` (the scorer's ``weights`` for GDPO); with
        ``kl_in_reward``, of the rewards less ``beta`` times the policy's KL from the reference
        (:func:`grpo_seq.math.advantages.kl_penalised_rewards`; ``batch.rewards`` stays as sampled)."""
        cfg = self.config
        if not cfg.kl_in_reward:
            return compute_advantages(batch, cfg, weights)
        with self.accelerator.autocast():
            logp = self.score(policy, batch)  # pi_old: the policy that sampled
        if self.config.reuses_batch:
            batch.old_logp = logp
        kl_t = kl_estimate(logp, batch.ref_logp, cfg.kl_estimator)
        name = "rewards" if cfg.advantage == "outcome" else "step_rewards"
        penalised = kl_penalised_rewards(getattr(batch, name), kl_t, batch.mask, cfg.beta)
        batch.metrics["reward/kl_penalty"] = float(cfg.beta * torch.where(batch.mask, kl_t, 0.0).sum(-1).mean())
        return compute_advantages(dataclasses.replace(batch, **{name: penalised}), cfg, weights)

    def sync_reference(self, policy: nn.Module, step: int) -> None:
        """After step ``step``, every ``ref_sync_steps`` steps: a reset to the policy (``ref_sync_alpha``
        1), or TR-DPO's soft mix."""
        cfg = self.config
        every = cfg.ref_sync_steps
        if not every or self.ref_policy is None or step % every:
            return
        if cfg.ref_sync_alpha == 1.0:
            self.ref_policy.load_state_dict(policy.state_dict())
        else:
            mix_reference(self.ref_policy, policy, cfg.ref_sync_alpha)
