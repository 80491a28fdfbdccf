"""The update of one step: ``mu`` passes over the batch, each split into minibatches, each
minibatch one optimizer step of the GRPO loss accumulated over micro-batches."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType
from torch import Tensor, nn

from ..math.batch import RolloutBatch
from .clock import device_clock
from .config import LoopConfig
from .entropy_control import EntropyControl
from ..math.objective import REDUCTIONS, LossVariant, aggregate, grpo_loss, importance_weights, sampler_log_ratio, sampler_mismatch_stats
from .stopping import any_process
from .guards import WeightGuard

__all__ = ["PolicyUpdate", "UpdateStats", "adamw"]


def adamw(params: list[nn.Parameter], **kwargs) -> torch.optim.AdamW:
    """AdamW, fused where torch has the kernel: one pass over each tensor instead of a dozen."""
    try:
        return torch.optim.AdamW(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):  # older torch, or a device or dtype without it
        return torch.optim.AdamW(params, **kwargs)


@dataclass
class UpdateStats:
    """What the update passes of one step add up: token-weighted sums of the loss statistics,
    the number of tokens they cover, and each optimizer step's loss and gradient norm."""

    token_sums: dict[str, Tensor] = field(default_factory=dict)
    tokens: float | Tensor = 0.0
    losses: list[Tensor] = field(default_factory=list)
    grad_norms: list[Tensor] = field(default_factory=list)
    entropy_bonuses: list[Tensor] = field(default_factory=list)  # each optimizer step's token-mean entropy term
    extremes: dict[str, Tensor] = field(default_factory=dict)  # statistics named *_min / *_max: their min / max
    skipped: bool = False  # skip_steps_without_signal: no optimizer step this step
    stopped_early: bool = False  # target_kl: the passes stopped before the last minibatch

    def add(self, token_stats: dict[str, Tensor], n: Tensor) -> None:
        """Statistics are token means: weight each micro-batch's by its token count ``n``; those
        named ``*_min`` / ``*_max`` keep their running min / max instead."""
        for name, v in token_stats.items():
            v = v.detach()
            if name.endswith(("_min", "_max")):
                pick = torch.minimum if name.endswith("_min") else torch.maximum
                self.extremes[name] = pick(self.extremes[name], v) if name in self.extremes else v
            else:
                self.token_sums[name] = self.token_sums.get(name, 0.0) + v * n
        self.tokens += n


def _sums(stats: UpdateStats, name: str) -> Tensor:
    """``[sum of token statistic name, tokens]`` trained so far this step, on the CPU."""
    return torch.stack([torch.as_tensor(stats.token_sums.get(name, 0.0)).float().cpu(),
                        torch.as_tensor(stats.tokens).float().cpu()])


class PolicyUpdate:
    """Moves the policy on one step's batch.

    Args:
        model, optimizer: as ``accelerator.prepare`` returned them; ``policy`` is the bare model.
        params: the trainable parameters (clipped and guarded).
        shuffle_gen: the generator that orders minibatches (checkpointed with the run).
        entropy_control: the entropy coefficient in force (fixed or adaptive).
        guard: the weight checks after each optimizer step.
    """

    def __init__(self, config: LoopConfig, accelerator: Accelerator, model: nn.Module, optimizer: Any,
                 policy: nn.Module, params: list[nn.Parameter], shuffle_gen: torch.Generator,
                 entropy_control: EntropyControl, guard: WeightGuard):
        self.config, self.accelerator, self.model, self.optimizer = config, accelerator, model, optimizer
        self.policy, self.params, self.shuffle_gen, self.guard = policy, params, shuffle_gen, guard
        self.entropy_control = entropy_control
        # target_kl watches the ratio only where it can move: with one optimizer step a batch, pi_old is
        # the policy being trained (its log-probs detached), and the estimate would be 0 throughout
        self.watch_kl = bool(config.target_kl) and config.reuses_batch
        self.variant = LossVariant.from_config(config)  # the GRPO family's per-token choices
        # importance sampling against a sampler that is not the policy (LMJob.sampler_correction), or None
        self.correction: dict[str, Any] | None = getattr(config, "sampler_correction", None)
        # accelerate's optimizer and clipping wrappers cost a few package lookups on every call,
        # as much as a whole CartPole update; where they would only forward the call (no grad
        # scaler, plain or DDP training) the update calls torch directly.
        self.plain_steps = accelerator.scaler is None and accelerator.distributed_type in (
            DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)
        self.step_tokens: Tensor | None = None  # loss_type=dapo's normaliser for this step
        self.optimizer_seconds = 0.0  # this step's time in optimizer.step
        self.step = 0  # the steps done before this one (for messages)
        self.epsilon = config.epsilon  # this step's clip range

    def set_lr(self, progress: float | None, learning_rate: float | None = None) -> float:
        """The learning rate of this step: ``learning_rate`` (this step's, from a caller's schedule;
        else the config's), decayed linearly with ``progress`` under ``lr_schedule='linear'``."""
        lr = self.config.learning_rate if learning_rate is None else learning_rate
        if self.config.lr_schedule == "linear" and progress is not None:
            lr *= max(0.0, 1.0 - progress)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        return lr

    def run(self, batch: RolloutBatch, live: Tensor, step: int, epsilon: float | None = None) -> UpdateStats:
        """``mu`` passes over the batch (step ``step + 1``), each split into optimizer steps
        (:meth:`minibatches`); ``epsilon``: this step's clip range (a caller's schedule), else the
        config's."""
        cfg, acc = self.config, self.accelerator
        self.step, self.optimizer_seconds = step, 0.0
        self.epsilon = cfg.epsilon if epsilon is None else epsilon
        self.model.train()
        stats = UpdateStats(tokens=torch.zeros((), device=acc.device))
        self.guard.nonfinite_this_step = 0
        parts = self._parts(batch)
        if cfg.skip_steps_without_signal and not any_process(bool((batch.advantages != 0).any()), acc):
            zero = torch.zeros((), device=acc.device)
            stats.losses.append(zero)  # logged as loss 0, grad norm 0 and no optimizer step
            stats.grad_norms.append(zero)
            stats.skipped = True
            return stats
        if self.watch_kl:  # on every process, so that every process logs it (step_metrics)
            stats.token_sums["approx_kl"] = torch.zeros((), device=acc.device)
        for _ in range(cfg.mu):
            for part, idx, part_live in self.minibatches(batch, parts, live):
                before, kl_before = self._entropy_sums(stats), self._kl_sums(stats)
                loss = self._accumulate_gradients(part, idx, part_live, stats)
                if self._over_target_kl(stats, kl_before):  # PPO's early stop: this gradient is dropped
                    self.optimizer.zero_grad(set_to_none=True)
                    stats.stopped_early = True
                    return stats
                stats.losses.append(loss)
                stats.grad_norms.append(torch.as_tensor(self.optimizer_step(), device=acc.device).detach().float())
                self._adapt_entropy(stats, before)
        return stats

    def _kl_sums(self, stats: UpdateStats) -> Tensor | None:
        """``[sum of token approximate KLs, tokens]`` so far this step (with ``target_kl`` only)."""
        return _sums(stats, "approx_kl") if self.watch_kl else None

    def _over_target_kl(self, stats: UpdateStats, before: Tensor | None) -> bool:
        """Whether the minibatch just scored moved the policy past ``1.5 x target_kl`` from the one that
        sampled the batch (its token-mean approximate KL, over all processes, so all stop together)."""
        return before is not None and self._mean_since(stats, "approx_kl", before) > 1.5 * self.config.target_kl

    def _mean_since(self, stats: UpdateStats, name: str, before: Tensor) -> float:
        """The token mean of statistic ``name`` over what was trained since ``before``, on every process."""
        window = self.accelerator.reduce((_sums(stats, name) - before).to(self.accelerator.device), "sum")
        return float(window[0] / window[1].clamp(min=1.0))

    def _parts(self, batch: RolloutBatch) -> int:
        """Optimizer steps per pass: ``num_minibatches``, or the batch's tokens over
        ``minibatch_tokens``; sets ``step_tokens`` for loss_type=dapo."""
        cfg, acc = self.config, self.accelerator
        parts = cfg.num_minibatches
        if REDUCTIONS[cfg.loss_type] == "dapo" or cfg.minibatch_tokens:
            total = acc.reduce(batch.mask.sum().float().reshape(1), "sum")[0]  # over all processes
            per_process = total / acc.num_processes
            if cfg.minibatch_tokens:  # the same count on every process: each optimizer step all-reduces
                parts = max(1, round(float(per_process) / cfg.minibatch_tokens))
            if REDUCTIONS[cfg.loss_type] == "dapo":  # the step's tokens per optimizer step and process
                self.step_tokens = per_process / parts
        return parts

    def minibatches(self, batch: RolloutBatch, parts: int, live: Tensor) -> Iterator[tuple[RolloutBatch, Tensor, Tensor]]:
        """One pass's minibatches as ``(batch, rows, live)``: ``parts`` random sets of whole outputs,
        or with ``minibatch_tokens`` ``parts`` random sets of the batch's tokens, as PPO draws env
        steps. A policy that scores each step on its own (``scores_steps_independently``) gets
        those steps as one-step outputs (:meth:`RolloutBatch.steps`); any other runs every output
        forward, in a copy of the batch whose mask holds only those tokens. The loss is the same."""
        B, device = batch.batch_size, self.accelerator.device
        if not self.config.minibatch_tokens:
            order = torch.randperm(B, generator=self.shuffle_gen) if parts > 1 else torch.arange(B)
            # equal parts (dynamic sampling may keep a batch that num_minibatches does not divide)
            for idx in order.tensor_split(parts):
                yield batch, idx.to(device), live
            return
        where = batch.mask.nonzero()
        order = torch.randperm(len(where), generator=self.shuffle_gen).to(where.device)
        every = torch.arange(B, device=device)
        flat = self._scores_steps(batch)
        for pick in order.tensor_split(parts):
            at = where[pick]
            if flat:
                yield batch.steps(at), torch.arange(len(at), device=device), live[at[:, 0]]
                continue
            mask = torch.zeros_like(batch.mask)
            mask[at[:, 0], at[:, 1]] = True
            yield dataclasses.replace(batch, mask=mask), every, live

    def _scores_steps(self, batch: RolloutBatch) -> bool:
        """Whether a minibatch of ``batch``'s tokens may be scored as one-step outputs: a policy that
        reads each token's own observation only, an env rollout, and no sampler correction (whose
        sequence modes need whole outputs)."""
        return (getattr(self.policy, "scores_steps_independently", False) and batch.one_observation_per_token
                and batch.sampler_logp is None)

    def _entropy_sums(self, stats: UpdateStats) -> Tensor | None:
        """``[sum of token entropies, tokens]`` trained so far this step (adaptive entropy only)."""
        return _sums(stats, "entropy") if self.entropy_control.adaptive else None

    def _adapt_entropy(self, stats: UpdateStats, before: Tensor | None) -> None:
        """After an optimizer step: the token-mean entropy of what it trained, over all processes,
        moves the adaptive entropy coefficient (:class:`grpo_seq.loop.entropy_control.EntropyControl`)."""
        if before is not None:
            self.entropy_control.update(self._mean_since(stats, "entropy", before))

    def _accumulate_gradients(self, batch: RolloutBatch, idx: Tensor, live: Tensor, stats: UpdateStats) -> Tensor:
        """Backward passes over minibatch ``idx`` in micro-batches of the rows that have a gradient;
        the loss is normalised by the whole minibatch's counts, so the sum is exact. Returns the
        minibatch's loss."""
        cfg, acc = self.config, self.accelerator
        rows = idx[live[idx]]
        # Every process must join the gradient all-reduce: one with nothing to train runs a
        # zero-advantage row at ratio 1, whose loss and gradient are exactly 0.
        stand_in = len(rows) == 0 and acc.num_processes > 1
        if stand_in:
            rows = idx[:1]
        chunks = rows.split(cfg.micro_batch_size or len(idx)) if len(rows) else ()
        counts = {"max_len": batch.tokens.shape[1], "num_outputs": len(idx), "num_tokens": batch.mask[idx].sum(),
                  "entropy_tokens": batch.mask[idx].sum()}
        if self.step_tokens is not None:
            counts["num_tokens"] = self.step_tokens
        mb_loss, mb_bonus = torch.zeros((), device=acc.device), torch.zeros((), device=acc.device)
        for j, chunk in enumerate(chunks):
            sub = batch.select(chunk)
            # Gradients are all-reduced once per optimizer step, on the last micro-batch.
            sync = contextlib.nullcontext() if j == len(chunks) - 1 else acc.no_sync(self.model)
            with sync:
                loss, token_stats = self._loss(sub, stand_in, counts)
                acc.backward(loss)
            mb_loss += loss.detach()
            mb_bonus += token_stats.pop("entropy_bonus", 0.0)
            if not stand_in:
                stats.add(token_stats, sub.mask.sum())
        if not chunks:  # nothing to train: Adam still steps (its moments move) on a zero gradient
            for p in self.params:
                p.grad = torch.zeros_like(p)
        if self.entropy_control.active:
            stats.entropy_bonuses.append(mb_bonus)
        return mb_loss

    def _importance_weights(self, sub: RolloutBatch, old_logp_t: Tensor) -> tuple[Tensor | None, dict[str, Tensor]]:
        """Truncated or masked importance weights of the trained policy against the sampler that
        drew ``sub`` (:func:`grpo_seq.math.objective.importance_weights`), and the mismatch statistics;
        ``(None, {})`` without a correction."""
        c = self.correction
        if c is None:
            return None, {}
        if sub.sampler_logp is None:
            raise ValueError(f"importance sampling ({c['mode']}) needs the sampler's log-probs, and "
                             "the sampler left batch.sampler_logp empty")
        level = "sequence" if c["mode"].startswith("sequence") else "token"
        log_ratio = sampler_log_ratio(old_logp_t, sub.sampler_logp, sub.mask, level)
        weight_t, corrected = importance_weights(log_ratio, c["mode"], c["cap"], c["floor"])
        return weight_t, sampler_mismatch_stats(old_logp_t, sub.sampler_logp, sub.mask, weight_t, corrected)

    def _loss(self, sub: RolloutBatch, stand_in: bool, counts: dict[str, Any]) -> tuple[Tensor, dict[str, Tensor]]:
        """The GRPO loss of micro-batch ``sub`` (:func:`grpo_seq.math.objective.grpo_loss`) and its token
        statistics, entropy included."""
        cfg = self.config
        logp_t, entropy_t = self.model(sub)
        old_logp_t = logp_t.detach() if sub.old_logp is None or stand_in else sub.old_logp
        is_weight_t, sampling = self._importance_weights(sub, old_logp_t)
        coef = 0.0 if stand_in else self.entropy_control.applied()
        variant = self.variant if coef == self.variant.entropy_coef else dataclasses.replace(self.variant, entropy_coef=coef)
        loss, stats = grpo_loss(
            logp_t, old_logp_t, sub.advantages, sub.mask, eps_low=self.epsilon, eps_high=cfg.epsilon_high,
            beta=0.0 if cfg.kl_in_reward else cfg.beta, ref_logp_t=sub.ref_logp, loss_type=cfg.loss_type, **counts,
            ent_coef=0.0 if stand_in or cfg.ent_mean == "token" else cfg.ent_coef, entropy_t=entropy_t, is_weight_t=is_weight_t,
            variant=variant, sampler_logp_t=sub.sampler_logp,
        )
        stats["entropy"] = aggregate(entropy_t.detach(), sub.mask, "bnpo")
        if self.watch_kl:  # Stable-Baselines3's estimate: mean of (r - 1) - log r over the tokens
            log_r = (logp_t - old_logp_t).detach()
            stats["approx_kl"] = aggregate(torch.expm1(log_r) - log_r, sub.mask, "bnpo")
        return loss, {**stats, **sampling}

    def optimizer_step(self) -> Tensor:
        """Clip (when configured), step and zero the gradients; returns the gradient norm.

        A NaN or inf gradient norm skips the step: the weights and Adam's moments stay as they
        were (:meth:`WeightGuard.count_nonfinite`). The norm is global (gradients are all-reduced
        first), so every process skips together. With a grad scaler (fp16) the scaler already
        skips such steps while it calibrates, so they are not counted here."""
        max_norm = self.config.max_grad_norm
        if self.plain_steps:  # an infinite max_norm measures the norm and scales by exactly 1
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm if max_norm > 0 else math.inf)
            optimizer = self.optimizer.optimizer
        else:
            grad_norm = torch.zeros(())
            if max_norm > 0:
                grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), max_norm)
            optimizer = self.optimizer
        finite = self.accelerator.scaler is not None or bool(torch.isfinite(grad_norm))
        watch = finite and self.config.divergence_factor > 0
        norm_before = self.guard.norm_before() if watch else 0.0
        t0 = time.perf_counter()
        if finite:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.optimizer_seconds += device_clock(self.accelerator.device) - t0
        self.guard.count_nonfinite(finite, self.step)
        if watch:
            self.guard.check_divergence(norm_before, self.step)
        return grad_norm
