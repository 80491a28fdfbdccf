"""The GRPO loop under accelerate: collect -> advantages -> score pi_old and pi_ref -> update -> log.

The trainer never looks inside the batch beyond tokens, mask, rewards and groups: a policy
scores its own batch (``policy(batch) -> (logp_t, entropy_t)``), a sampler draws it, so the same
loop trains a language model or a CartPole agent.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import math
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, gather_object, set_seed
from torch import Tensor, nn

from . import checkpoint as ckpt
from .advantages import compute_advantages, equal_reward_groups, kl_penalised_rewards
from .batch import RolloutBatch
from .config import GRPOConfig
from .diagnostics import SignalWatch, weight_growth, weight_norm
from .dynamic_sampling import fill_informative
from .entropy_control import EntropyControl
from .errors import ConfigError, DivergedError, NonFiniteError
from .launch_record import launch_record
from .metrics import JsonlLogger
from .objective import (REDUCTIONS, SAMPLING_MEANS, LossVariant, aggregate, grpo_loss, importance_weights, kl_estimate,
                        sampler_log_ratio, sampler_mismatch_stats)
from .reference import mix_reference
from .run_dir import RunLock, foreign_run_error, replace_run, run_files, stopped_before_checkpoint
from .sampling.base import GroupSampler
from .serialization import atomic_write_text, link_folder, save_policy
from .stopping import any_process
from .tracking import tracker_config

__all__ = ["GRPOTrainer", "compute_advantages"]

logger = logging.getLogger(__name__)

ScoreFn = Callable[[RolloutBatch], RolloutBatch]
TOKEN_STATS = ("kl", "clip_fraction", "ratio", "entropy")  # means over scored tokens


def _adamw(params: list[nn.Parameter], **kwargs) -> torch.optim.AdamW:
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
    entropy_bonuses: list[Tensor] = field(default_factory=list)  # each optimizer step's entropy_coef term
    extremes: dict[str, Tensor] = field(default_factory=dict)  # statistics named *_min / *_max: their min / max
    skipped: bool = False  # skip_steps_without_signal: no optimizer step this step


# A policy exploring at least this much (nats per token) that falls below COLLAPSED_ENTROPY in one
# step has collapsed (GRPOTrainer._check_collapse).
EXPLORING_ENTROPY = 0.1
COLLAPSED_ENTROPY = 1e-6
COLLAPSE_MIN_TOKENS = 16


def _ask_for_entropy_grad(config: GRPOConfig, policy: nn.Module) -> None:
    """An objective with an entropy term (ent_coef, entropy_coef, adaptive entropy) needs the
    policy's entropy with a gradient: a policy that computes it only on request
    (``enable_entropy_grad``, a language model) is asked; one that cannot give it is refused."""
    needs = {"ent_coef": config.ent_coef > 0, "entropy_coef": config.entropy_coef > 0 or config.use_adaptive_entropy}
    has_grad = lambda: getattr(policy, "entropy_has_grad", False)  # noqa: E731
    if any(needs.values()) and not has_grad() and hasattr(policy, "enable_entropy_grad"):
        policy.enable_entropy_grad()
    name = type(policy).__name__
    if needs["ent_coef"] and not has_grad():
        raise ConfigError(f"GRPOConfig.ent_coef={config.ent_coef}: {name} gives no entropy with a gradient; "
                          "set ent_coef to 0")
    if needs["entropy_coef"] and not has_grad():
        raise ConfigError(f"GRPOConfig.entropy_coef={config.entropy_coef}: {name} gives no entropy with a gradient; "
                          "set entropy_coef to 0 and use_adaptive_entropy to false")


class GRPOTrainer:
    """Trains ``policy`` with GRPO on groups drawn by ``sampler``.

    Constructing it seeds the global python, numpy and torch RNGs with ``config.seed``
    (accelerate's ``set_seed``), so that a run repeats exactly; it changes nothing else outside
    itself.

    Args:
        config: the hyper-parameters.
        policy: an ``nn.Module`` whose ``forward(batch)`` returns per-token log-probs and
            entropies ``(B, T)`` of ``batch.tokens``; the sampler calls whatever it needs on it.
        sampler: a :class:`GroupSampler`; on several processes each has its own (seeded apart),
            so every process samples whole groups and group statistics never cross processes.
        accelerator: built with defaults when omitted.
        score_fn: fills ``batch.rewards`` (reward functions for text); omitted when the sampler
            already knows the rewards (an environment).
    """

    def __init__(
        self,
        config: GRPOConfig,
        policy: nn.Module,
        sampler: GroupSampler,
        accelerator: Accelerator | None = None,
        score_fn: ScoreFn | None = None,
    ):
        if sampler.group_size != config.num_generations or sampler.num_groups != config.num_groups:
            raise ValueError(
                f"sampler draws {sampler.num_groups} groups of {sampler.group_size} but GRPOConfig says "
                f"num_groups={config.num_groups}, num_generations={config.num_generations}"
            )
        _ask_for_entropy_grad(config, policy)
        self.config, self.sampler, self.score_fn = config, sampler, score_fn
        self._variant = LossVariant.from_config(config)  # the GRPO family's per-token choices
        self.entropy_control = EntropyControl.from_config(config)
        self._unseen_tokens = 0  # tokens this step drew in groups that dynamic sampling dropped
        self._step_tokens: Tensor | None = None  # loss_type=dapo's normaliser for this step
        # importance sampling against a sampler that is not the policy (LMJob.sampler_correction), or None
        self._correction: dict[str, Any] | None = getattr(config, "sampler_correction", None)
        # A missing or damaged --resume_from is refused before anything is created or written.
        self._resume_folder = ckpt.resolve_checkpoint(config.resume_from) if config.resume_from else None
        self.accelerator = accelerator or Accelerator()
        set_seed(config.seed)
        self.shuffle_gen = torch.Generator().manual_seed(config.seed)
        self._build_reference(policy)
        self._params = [p for p in policy.parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("the policy has no trainable parameters")
        optimizer = _adamw(self._params, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                           eps=config.adam_eps, weight_decay=config.weight_decay)
        self.model, self.optimizer = self.accelerator.prepare(policy, optimizer)
        self._bare_policy = self.accelerator.unwrap_model(self.model)
        # accelerate's optimizer and clipping wrappers cost a few package lookups on every call,
        # as much as a whole CartPole update; where they would only forward the call (no grad
        # scaler, plain or DDP training) the trainer calls torch directly.
        self._plain_steps = self.accelerator.scaler is None and self.accelerator.distributed_type in (
            DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)
        self.step_count = 0
        self.env_steps = 0
        self._nonfinite_in_a_row = self._nonfinite_this_step = 0
        self._num_weights = sum(p.numel() for p in self._params)
        self._start_norm: float | None = None  # the weights' norm before this process's first update
        self._last_norm: float | None = None  # the weights' norm after the last optimizer step (None: measure afresh)
        self._optimizer_seconds = 0.0  # this step's time in optimizer.step (a phase of perf/step_seconds)
        self._phase_seconds: dict[str, float] = {}
        self.diverged_at: int | None = None  # the step whose update diverged (DivergedError): nothing is saved after it
        self._checkpointed_step: int | None = None  # the step of the checkpoint this process wrote last
        self.last_batch: RolloutBatch | None = None
        self.signal = SignalWatch()  # says so, once, when most groups carry no signal for a while
        self._open_run_dir()

    def _build_reference(self, policy: nn.Module) -> None:
        """No reference at all with beta = 0: nothing to load, nothing to run. A LoRA policy is
        its own reference with the adapters disabled: no second copy in memory."""
        cfg = self.config
        self.ref_policy = None
        self.ref_is_base = cfg.beta > 0 and getattr(policy, "has_adapters", False)
        if self.ref_is_base and cfg.sync_ref_model:
            raise ValueError("GRPOConfig.sync_ref_model: a LoRA policy's reference is its base model with the adapters "
                             "disabled and cannot move toward the policy; set sync_ref_model=false")
        if self.ref_is_base and cfg.ref_sync_steps:
            raise ValueError(
                "GRPOConfig.ref_sync_steps: a LoRA policy's reference is its base model with the adapters "
                "disabled and cannot be reset to the current policy; set ref_sync_steps=0"
            )
        if cfg.beta > 0 and not self.ref_is_base:
            self.ref_policy = copy.deepcopy(policy).requires_grad_(False).eval().to(self.accelerator.device)

    def _open_run_dir(self) -> None:
        """Lock ``output_dir`` for this run (main process; :class:`grpo_seq.run_dir.RunLock`) and
        start the trackers the accelerator was built with (recipes: ``tracker_kwargs(--report_to)``).

        A folder that already holds a run is replaced with ``overwrite``; otherwise it is refused
        at this run's first write (:meth:`start_run`), unless :meth:`resume` resumes that run."""
        cfg = self.config
        self.output_dir = Path(cfg.output_dir).expanduser() if cfg.output_dir else None
        self.logger = self._lock = None
        self._foreign_run: list[str] = []
        if self.output_dir is not None and self.accelerator.is_main_process:
            self._lock = RunLock(self.output_dir).acquire()
            resuming = self._resume_folder is not None and \
                ckpt.run_dir_of(self._resume_folder).resolve() == self.output_dir.resolve()
            found = run_files(self.output_dir)
            if found and not resuming:
                if cfg.overwrite:
                    replace_run(self.output_dir, found)
                elif stopped_before_checkpoint(self.output_dir, found):
                    replace_run(self.output_dir, found, "replacing a run that stopped before its first checkpoint in")
                else:
                    self._foreign_run = found
        self._tracking = bool(getattr(self.accelerator, "log_with", None))
        if self._tracking:
            name = self.output_dir.name if self.output_dir is not None else "grpo-seq"
            self.accelerator.init_trackers(name, config=tracker_config(cfg.to_dict()))

    def start_run(self) -> None:
        """Before this run's first write: refuse a folder holding another run; write config.json
        and open metrics.jsonl (main process)."""
        if self.logger is not None or self._lock is None:
            return
        if self._foreign_run:
            self._lock.release()
            raise foreign_run_error(self.output_dir, self._foreign_run)
        # the run's spec: fed back with --config (or grpo-seq run), it repeats the run
        atomic_write_text(self.output_dir / "config.json", json.dumps({**self.config.to_dict(), **launch_record(self.accelerator)},
                                                                     indent=2))
        self.logger = JsonlLogger(self.output_dir / "metrics.jsonl")

    @property
    def policy(self) -> nn.Module:
        """The bare policy (without a DDP wrapper), for sampling, evaluation and saving."""
        return self._bare_policy

    # -- one step ----------------------------------------------------------------------------------

    def step(self, progress: float | None = None) -> dict[str, float]:
        """One iteration: collect groups, compute advantages, score pi_old and pi_ref, ``mu`` update
        passes, log.

        Args:
            progress: fraction of the run done, in [0, 1]; drives ``lr_schedule='linear'``.

        Returns the step's metrics (averaged over processes), also appended to metrics.jsonl.
        """
        self.start_run()
        t0 = time.perf_counter()
        batch = self._collect()
        t_sample = time.perf_counter() - t0
        self._score_ref(batch)
        batch.advantages = self._advantages(batch)
        train = self._for_loss(batch)
        live = self._rows_with_gradient(train)
        self._score_old(train, live)
        t_scored = time.perf_counter()
        self.last_batch = batch
        lr = self._set_lr(progress)
        self._optimizer_seconds = 0.0
        stats = self._update(train, live)
        # where the step's time went: sampling, old/reference scoring, forward/backward, optimizer
        self._phase_seconds = {"perf/score_seconds": t_scored - t0 - t_sample,
                               "perf/backward_seconds": time.perf_counter() - t_scored - self._optimizer_seconds,
                               "perf/optimizer_seconds": self._optimizer_seconds}
        self._check_collapse(train, live, stats)
        self.step_count += 1
        self._maybe_sync_reference()
        metrics = self._metrics(batch, live, stats, lr, t0, t_sample)
        if self.signal.update(self._grouped_rewards.tolist()):
            logger.warning("%s", self.signal.message)
        metrics["reward/flat_steps_in_a_row"] = float(self.signal.flat_in_a_row)
        self.log(metrics)
        return metrics

    def _collect(self) -> RolloutBatch:
        """The step's groups (:meth:`_draw`); with ``dynamic_sampling`` only groups whose rewards
        differ, drawn again while too few (:func:`grpo_seq.dynamic_sampling.fill_informative`)."""
        cfg = self.config
        if not cfg.dynamic_sampling:
            return self._draw()
        budget = getattr(self.sampler, "step_budget", None)  # env steps this process may still take (a job's)
        if budget is None:
            batch, self._unseen_tokens = fill_informative(self._draw, cfg.num_groups, cfg.max_resample_rounds)
            return batch

        def draw() -> RolloutBatch:  # each draw spends the budget the next one gets
            batch = self._draw()
            self.sampler.step_budget -= batch.num_tokens
            return batch

        try:
            batch, self._unseen_tokens = fill_informative(
                draw, cfg.num_groups, cfg.max_resample_rounds,
                can_draw=lambda: self.sampler.step_budget >= cfg.num_groups * cfg.num_generations)
        finally:
            self.sampler.step_budget = budget
        return batch

    def _draw(self) -> RolloutBatch:
        """G outputs per group from the sampler, rewards filled in, on the training device."""
        cfg, acc = self.config, self.accelerator
        self.model.eval()
        with acc.autocast():
            batch = self.sampler.sample(self.policy)
        expected = (cfg.num_groups * cfg.num_generations, cfg.num_generations)
        if (batch.batch_size, batch.group_size) != expected:
            raise ValueError(
                f"{type(self.sampler).__name__}.sample returned {batch.batch_size} outputs in groups of "
                f"{batch.group_size}; GRPOConfig asks for num_groups={cfg.num_groups} x num_generations="
                f"{cfg.num_generations} = {expected[0]} outputs in groups of {expected[1]}"
            )
        if self.score_fn is not None:
            batch = self.score_fn(batch)
        return batch.to(acc.device)

    def _rows_with_gradient(self, batch: RolloutBatch) -> Tensor:
        """``(B,)`` bool: the outputs whose loss has a gradient. With beta = 0 the loss of a token is
        ``-min(r A, clip(r) A)``, exactly 0 with a zero gradient where A = 0: an output with A = 0 at
        every token (a group whose rewards are all equal) needs no forward or backward pass (unless
        an entropy bonus gives every token a gradient). The loss keeps the whole batch's counts in its denominators, so the update does not change."""
        cfg = self.config
        # a token mean of the entropy, or its quantile, covers zero-advantage tokens too
        entropy_free = cfg.ent_coef == 0 and not self.entropy_control.active and cfg.top_entropy_quantile == 1.0
        if cfg.skip_zero_advantage and cfg.beta == 0 and entropy_free:
            return ((batch.advantages != 0) & batch.mask).any(-1)
        return torch.ones(batch.batch_size, dtype=torch.bool, device=batch.tokens.device)

    def _score_ref(self, batch: RolloutBatch) -> None:
        """``batch.ref_logp`` under the reference (beta > 0)."""
        with self.accelerator.autocast():
            if self.ref_policy is not None:
                batch.ref_logp = self._score(self.ref_policy, batch)
            elif self.ref_is_base:
                with self.policy.adapters_disabled():
                    batch.ref_logp = self._score(self.policy, batch)

    @property
    def _reuses_batch(self) -> bool:
        """Whether the policy moves before the batch's last minibatch (pi_old is then not pi_theta)."""
        cfg = self.config
        return cfg.mu * cfg.num_minibatches > 1 or cfg.minibatch_tokens > 0

    def _score_old(self, batch: RolloutBatch, live: Tensor) -> None:
        """``batch.old_logp`` under the sampling policy when it will be updated more than once; with
        one update pi_old is pi_theta, and its log-probs are the current ones, detached, at no cost."""
        if self._reuses_batch and batch.old_logp is None:
            with self.accelerator.autocast():
                batch.old_logp = self._score(self.policy, batch, rows=live)

    def _advantages(self, batch: RolloutBatch) -> Tensor:
        """:func:`grpo_seq.advantages.compute_advantages` (the scorer's weights for GDPO); with
        ``kl_in_reward``, of the rewards less ``beta`` times the policy's KL from the reference
        (:func:`grpo_seq.advantages.kl_penalised_rewards`; ``batch.rewards`` stays as sampled)."""
        cfg = self.config
        weights = getattr(self.score_fn, "weights", None)
        if not cfg.kl_in_reward:
            return compute_advantages(batch, cfg, weights)
        with self.accelerator.autocast():
            logp = self._score(self.policy, batch)  # pi_old: the policy that sampled
        if self._reuses_batch:
            batch.old_logp = logp
        kl_t = kl_estimate(logp, batch.ref_logp, cfg.kl_estimator)
        name = "rewards" if cfg.advantage == "outcome" else "step_rewards"
        penalised = kl_penalised_rewards(getattr(batch, name), kl_t, batch.mask, cfg.beta)
        batch.metrics["reward/kl_penalty"] = float(cfg.beta * torch.where(batch.mask, kl_t, 0.0).sum(-1).mean())
        return compute_advantages(dataclasses.replace(batch, **{name: penalised}), cfg, weights)

    def _for_loss(self, batch: RolloutBatch) -> RolloutBatch:
        """The batch the loss sees: with ``mask_truncated_completions`` the outputs cut off at the
        length limit keep their place (and their group's advantages) but no token in the loss."""
        if not self.config.mask_truncated_completions:
            return batch
        if batch.truncated is None:
            raise ConfigError(f"GRPOConfig.mask_truncated_completions: {type(self.sampler).__name__} marks no output as "
                              "truncated (batch.truncated); set it to false")
        return dataclasses.replace(batch, mask=batch.mask & ~batch.truncated.bool()[:, None])

    @torch.no_grad()
    def _score(self, policy: nn.Module, batch: RolloutBatch, rows: Tensor | None = None) -> Tensor:
        """Log-probs ``(B, T)`` of the batch's tokens under ``policy``, in micro-batches, no gradients;
        with ``rows`` (a bool mask over outputs) only those are scored and the others hold NaN."""
        micro = self.config.micro_batch_size or batch.batch_size
        idx = torch.arange(batch.batch_size, device=batch.tokens.device)
        out = torch.full(batch.tokens.shape, float("nan"), device=batch.tokens.device)
        for c in (idx if rows is None else idx[rows]).split(micro):
            out[c] = policy(batch.select(c), with_entropy=False)[0].float()
        return out

    def _set_lr(self, progress: float | None) -> float:
        lr = self.config.learning_rate
        if self.config.lr_schedule == "linear" and progress is not None:
            lr *= max(0.0, 1.0 - progress)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        return lr

    def _update(self, batch: RolloutBatch, live: Tensor) -> UpdateStats:
        """``mu`` passes over the batch, each split into optimizer steps (:meth:`_minibatches`)."""
        cfg = self.config
        self.model.train()
        stats = UpdateStats(tokens=torch.zeros((), device=self.accelerator.device))
        self._nonfinite_this_step = 0
        parts = cfg.num_minibatches
        if REDUCTIONS[cfg.loss_type] == "dapo" or cfg.minibatch_tokens:
            total = self.accelerator.reduce(batch.mask.sum().float().reshape(1), "sum")[0]  # over all processes
            per_process = total / self.accelerator.num_processes
            if cfg.minibatch_tokens:  # the same count on every process: each optimizer step all-reduces
                parts = max(1, round(float(per_process) / cfg.minibatch_tokens))
            if REDUCTIONS[cfg.loss_type] == "dapo":  # the step's tokens per optimizer step and process
                self._step_tokens = per_process / parts
        if cfg.skip_steps_without_signal and not any_process(bool((batch.advantages != 0).any()), self.accelerator):
            zero = torch.zeros((), device=self.accelerator.device)
            stats.losses.append(zero)  # logged as loss 0, grad norm 0 and no optimizer step
            stats.grad_norms.append(zero)
            stats.skipped = True
            return stats
        for _ in range(cfg.mu):
            for part, idx, part_live in self._minibatches(batch, parts, live):
                before = self._entropy_sums(stats)
                stats.losses.append(self._accumulate_gradients(part, idx, part_live, stats))
                stats.grad_norms.append(torch.as_tensor(self._optimizer_step(), device=self.accelerator.device)
                                        .detach().float())
                self._adapt_entropy(stats, before)
        return stats

    def _minibatches(self, batch: RolloutBatch, parts: int, live: Tensor) -> Iterator[tuple[RolloutBatch, Tensor, Tensor]]:
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
        if not self.entropy_control.adaptive:
            return None
        return torch.stack([torch.as_tensor(stats.token_sums.get("entropy", 0.0)).float().cpu(),
                            torch.as_tensor(stats.tokens).float().cpu()])

    def _adapt_entropy(self, stats: UpdateStats, before: Tensor | None) -> None:
        """After an optimizer step: the token-mean entropy of what it trained, over all processes,
        moves the adaptive entropy coefficient (:class:`grpo_seq.entropy_control.EntropyControl`)."""
        if before is None:
            return
        window = self.accelerator.reduce((self._entropy_sums(stats) - before).to(self.accelerator.device), "sum")
        self.entropy_control.update(float(window[0] / window[1].clamp(min=1.0)))

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
        if self._step_tokens is not None:
            counts["num_tokens"] = self._step_tokens
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
                self._add_token_stats(stats, token_stats, sub.mask.sum())
        if not chunks:  # nothing to train: Adam still steps (its moments move) on a zero gradient
            for p in self._params:
                p.grad = torch.zeros_like(p)
        if self.entropy_control.active:
            stats.entropy_bonuses.append(mb_bonus)
        return mb_loss

    @staticmethod
    def _add_token_stats(stats: UpdateStats, token_stats: dict[str, Tensor], n: Tensor) -> None:
        """Statistics are token means: weight each micro-batch's by its token count ``n``; those
        named ``*_min`` / ``*_max`` keep their running min / max instead."""
        for name, v in token_stats.items():
            v = v.detach()
            if name.endswith(("_min", "_max")):
                pick = torch.minimum if name.endswith("_min") else torch.maximum
                stats.extremes[name] = pick(stats.extremes[name], v) if name in stats.extremes else v
            else:
                stats.token_sums[name] = stats.token_sums.get(name, 0.0) + v * n
        stats.tokens += n

    def _importance_weights(self, sub: RolloutBatch, old_logp_t: Tensor) -> tuple[Tensor | None, dict[str, Tensor]]:
        """Truncated or masked importance weights of the trained policy against the sampler that
        drew ``sub`` (:func:`grpo_seq.objective.importance_weights`), and the mismatch statistics;
        ``(None, {})`` without a correction."""
        c = self._correction
        if c is None:
            return None, {}
        if sub.sampler_logp is None:
            raise ValueError(f"importance sampling ({c['mode']}) needs the sampler's log-probs, and "
                             f"{type(self.sampler).__name__} left batch.sampler_logp empty")
        level = "sequence" if c["mode"].startswith("sequence") else "token"
        log_ratio = sampler_log_ratio(old_logp_t, sub.sampler_logp, sub.mask, level)
        weight_t, corrected = importance_weights(log_ratio, c["mode"], c["cap"], c["floor"])
        return weight_t, sampler_mismatch_stats(old_logp_t, sub.sampler_logp, sub.mask, weight_t, corrected)

    def _loss(self, sub: RolloutBatch, stand_in: bool, counts: dict[str, Any]) -> tuple[Tensor, dict[str, Tensor]]:
        """The GRPO loss of micro-batch ``sub`` (:func:`grpo_seq.objective.grpo_loss`) and its token
        statistics, entropy included."""
        cfg = self.config
        logp_t, entropy_t = self.model(sub)
        old_logp_t = logp_t.detach() if sub.old_logp is None or stand_in else sub.old_logp
        is_weight_t, sampling = self._importance_weights(sub, old_logp_t)
        coef = 0.0 if stand_in else self.entropy_control.applied()
        variant = self._variant if coef == self._variant.entropy_coef else dataclasses.replace(self._variant, entropy_coef=coef)
        loss, stats = grpo_loss(
            logp_t, old_logp_t, sub.advantages, sub.mask, eps_low=cfg.epsilon, eps_high=cfg.epsilon_high,
            beta=0.0 if cfg.kl_in_reward else cfg.beta, ref_logp_t=sub.ref_logp, loss_type=cfg.loss_type, **counts,
            ent_coef=0.0 if stand_in else cfg.ent_coef, entropy_t=entropy_t, is_weight_t=is_weight_t,
            variant=variant, sampler_logp_t=sub.sampler_logp,
        )
        stats["entropy"] = aggregate(entropy_t.detach(), sub.mask, "bnpo")
        return loss, {**stats, **sampling}

    def _maybe_sync_reference(self) -> None:
        """A hard reset every ``ref_sync_steps`` steps, or TR-DPO's soft mix every ``ref_model_sync_steps``."""
        cfg = self.config
        every = cfg.ref_sync_steps
        if every and self.ref_policy is not None and self.step_count % every == 0:
            self.ref_policy.load_state_dict(self.policy.state_dict())
        if cfg.sync_ref_model and self.ref_policy is not None and self.step_count % cfg.ref_model_sync_steps == 0:
            mix_reference(self.ref_policy, self.policy, cfg.ref_model_mixup_alpha)

    def _metrics(self, batch: RolloutBatch, live: Tensor, stats: UpdateStats, lr: float, t0: float,
                 t_sample: float) -> dict[str, float]:
        """The step's metrics over all processes: per-output values gathered (exact std and max),
        token statistics as token means, the rest averaged."""
        acc = self.accelerator
        rewards, lengths = self._gather_rows(batch.rewards.float().contiguous(), batch.lengths().float().contiguous())
        grouped = rewards.reshape(-1, batch.group_size)
        self._grouped_rewards = grouped  # every process's groups, for the signal watch
        zero = torch.zeros((), device=acc.device)
        sums = acc.reduce(torch.stack([*(torch.as_tensor(stats.token_sums.get(n, zero)).float() for n in TOKEN_STATS),
                                       torch.as_tensor(stats.tokens, device=acc.device).float()]), "sum")
        # When every output was skipped no token was scored: the statistics are NaN (null in
        # metrics.jsonl), except KL, which skipping's beta = 0 leaves at 0 anyway.
        scored = float(sums[-1]) > 0
        token_means = {n: sums[i] / sums[-1] if scored else (zero if n == "kl" else zero + float("nan"))
                       for i, n in enumerate(TOKEN_STATS)}
        averaged = {"perf/trained_fraction": live.float().mean(), "loss/policy": torch.stack(stats.losses).mean(),
                    "loss/grad_norm": torch.stack(stats.grad_norms).mean(),
                    "perf/optimizer_steps": 0.0 if stats.skipped else float(len(stats.grad_norms)),
                    "loss/nonfinite_steps": float(self._nonfinite_this_step), **batch.metrics}
        if stats.entropy_bonuses:  # what entropy_coef's term took off loss/policy
            averaged["loss/entropy_bonus"] = torch.stack(stats.entropy_bonuses).mean()
        reduced = acc.reduce(torch.stack([torch.as_tensor(v, device=acc.device).float() for v in averaged.values()]), "mean")
        metrics = {
            "reward/mean": rewards.mean(), "reward/std": rewards.std(), "reward/group_std": grouped.std(dim=1).mean(),
            "reward/zero_std_groups": equal_reward_groups(grouped).float().mean(),
            "policy/completion_length": lengths.mean(), "policy/completion_length_max": lengths.max(),
            **{f"policy/{n}": v for n, v in token_means.items()},
            **dict(zip(averaged, reduced)),
        }
        metrics = {k: float(v) for k, v in metrics.items()}
        metrics.update(self._sampling_metrics(stats))
        if self.entropy_control.active:
            metrics["policy/entropy_coef"] = self.entropy_control.applied()
        tokens = int(lengths.sum())
        if self.config.dynamic_sampling:  # the dropped groups' steps were sampled too
            tokens += int(acc.reduce(torch.tensor([float(self._unseen_tokens)], device=acc.device), "sum")[0])
        self.env_steps += tokens
        seconds = time.perf_counter() - t0
        metrics.update({
            "step": self.step_count, "perf/tokens_total": self.env_steps, "perf/lr": lr,
            "perf/step_seconds": seconds, "perf/sample_seconds": t_sample,
            "perf/tokens_per_second": tokens / seconds,
            "perf/samples_per_second": batch.batch_size * acc.num_processes / seconds,
            "perf/peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "perf/torch_threads": torch.get_num_threads(), **self._phase_seconds,
        })
        return metrics

    def _gather_rows(self, *values: Tensor) -> list[Tensor]:
        """Per-output values of every process, concatenated; with dynamic sampling the processes may
        hold different numbers of outputs, so each is padded to the longest and the padding dropped."""
        acc = self.accelerator
        if not self.config.dynamic_sampling or acc.num_processes == 1:
            return [acc.gather(v) for v in values]
        real = acc.gather(acc.pad_across_processes(torch.ones(len(values[0]), device=acc.device), dim=0)).bool()
        return [acc.gather(acc.pad_across_processes(v, dim=0))[real] for v in values]

    def _sampling_metrics(self, stats: UpdateStats) -> dict[str, float]:
        """The sampler-versus-policy statistics over all processes (with a correction only): token
        means of :data:`grpo_seq.objective.SAMPLING_MEANS`, the min and max importance weight; NaN
        where no token was trained."""
        if self._correction is None:
            return {}
        acc = self.accelerator
        zero = torch.zeros((), device=acc.device)
        sums = acc.reduce(torch.stack([*(torch.as_tensor(stats.token_sums.get(n, zero)).float() for n in SAMPLING_MEANS),
                                       torch.as_tensor(stats.tokens, device=acc.device).float()]), "sum")
        out = {n: float(sums[i] / sums[-1]) if float(sums[-1]) > 0 else math.nan for i, n in enumerate(SAMPLING_MEANS)}
        for name, pick in (("sampling/is_ratio_min", torch.min), ("sampling/is_ratio_max", torch.max)):
            found = acc.gather(stats.extremes.get(name, zero + math.nan).float().reshape(1))
            found = found[torch.isfinite(found)]  # a process or micro-batches with no trained token: +-inf
            out[name] = float(pick(found)) if len(found) else math.nan
        return out

    def _optimizer_step(self) -> Tensor:
        """Clip (when configured), step and zero the gradients; returns the gradient norm.

        A NaN or inf gradient norm skips the step: the weights and Adam's moments stay as they
        were (:meth:`_count_nonfinite`). The norm is global (gradients are all-reduced first), so
        every process skips together. With a grad scaler (fp16) the scaler already skips such
        steps while it calibrates, so they are not counted here."""
        max_norm = self.config.max_grad_norm
        if self._plain_steps:  # an infinite max_norm measures the norm and scales by exactly 1
            grad_norm = torch.nn.utils.clip_grad_norm_(self._params, max_norm if max_norm > 0 else math.inf)
            optimizer = self.optimizer.optimizer
        else:
            grad_norm = torch.zeros(())
            if max_norm > 0:
                grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), max_norm)
            optimizer = self.optimizer
        finite = self.accelerator.scaler is not None or bool(torch.isfinite(grad_norm))
        watch = finite and self.config.divergence_factor > 0
        # only the optimizer moves the weights between its steps: the norm after the last is the one before this
        norm_before = (self._last_norm if self._last_norm is not None else weight_norm(self._params)) if watch else 0.0
        t0 = time.perf_counter()
        if finite:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self._optimizer_seconds += time.perf_counter() - t0
        self._count_nonfinite(finite)
        if watch:
            self._check_divergence(norm_before)
        return grad_norm

    def _check_divergence(self, norm_before: float) -> None:
        """Raise :class:`DivergedError` when the optimizer step just taken multiplied the weights'
        global norm by more than ``divergence_factor`` (:func:`grpo_seq.diagnostics.weight_growth`).
        The trainer then refuses to save: the diverged weights never reach a checkpoint or a policy
        folder. The norm is global and the weights equal on every process, so all stop together."""
        norm_after = self._last_norm = weight_norm(self._params)
        if self._start_norm is None:
            self._start_norm = norm_before
        growth = weight_growth(norm_before, norm_after, self._num_weights)
        # A rate too high for one step to show (each step adds about lr per weight) piles up: measured
        # from the start as well, the same factor catches it some steps later.
        since_start = weight_growth(self._start_norm, norm_after, self._num_weights)
        factor = self.config.divergence_factor
        if growth <= factor and since_start <= factor:  # NaN fails the tests: diverged too
            return
        self.diverged_at = self.step_count + 1
        if not growth <= factor:
            what = f"{growth:.3g}-fold in one optimizer step ({norm_before:.3g} -> {norm_after:.3g})"
        else:
            what = f"{since_start:.3g}-fold since this run's first update here ({self._start_norm:.3g} -> {norm_after:.3g})"
        raise DivergedError(self._divergence_message(f"the weights' norm grew {what}"))

    @torch.no_grad()
    def _check_collapse(self, batch: RolloutBatch, live: Tensor, stats: UpdateStats) -> None:
        """Raise :class:`DivergedError` when one step turned a policy that still explored into a
        deterministic one: its mean entropy over the tokens just trained fell below
        ``COLLAPSED_ENTROPY`` nats from at least ``EXPLORING_ENTROPY``. Healthy learning lowers the
        entropy over many steps; a learning rate far too high does it in one, and the run would
        then go on with every group's members alike (nothing left to learn from). Checked for
        policies small enough that the extra forward pass costs nothing (not language models)."""
        if self.config.divergence_factor == 0 or hasattr(self.policy, "save_to") or not stats.tokens:
            return
        before = float(stats.token_sums["entropy"] / stats.tokens)
        if before < EXPLORING_ENTROPY:
            return
        sub = batch.select(torch.arange(batch.batch_size, device=batch.tokens.device)[live])
        if sub.mask.sum() < COLLAPSE_MIN_TOKENS or sub.mask.sum() < 4 * sub.batch_size:
            return  # too few decisions to tell, or one-decision outputs (alternatives), which may rightly be sure
        self.model.eval()
        entropy_t = self.policy(sub, with_entropy=True)[1]
        after = float(aggregate(entropy_t.float(), sub.mask, "bnpo"))
        if after < COLLAPSED_ENTROPY:
            self.diverged_at = self.step_count + 1
            raise DivergedError(self._divergence_message(
                f"the policy collapsed to determinism in one step (its entropy fell from {before:.3g} to {after:.2g} "
                "nats per token)"))

    def _divergence_message(self, what: str) -> str:
        """The cause (the learning rate first), what was kept, and the ways out."""
        cfg = self.config
        if self.output_dir is None:
            kept = "the trainer saves nothing after it"
        else:
            found = ckpt.list_checkpoints(self.output_dir)
            kept = f"the last sane checkpoint is {found[-1]}" if found else "no checkpoint was written before it"
        return (
            f"the run diverged at step {self.diverged_at}: {what} (--divergence_factor {cfg.divergence_factor:g}); the "
            f"diverged weights were not saved, and {kept}. Likely cause: a learning rate too high for this model; "
            f"lower --learning_rate (now {cfg.learning_rate:g}) and start a new run (another --output_dir, or "
            "--overwrite), or give --divergence_factor 0 to train on regardless"
        )

    def _count_nonfinite(self, finite: bool) -> None:
        """Count a skipped step; ``max_nonfinite_steps`` of them in a row raise :class:`NonFiniteError`."""
        if finite:
            self._nonfinite_in_a_row = 0
            return
        self._nonfinite_in_a_row += 1
        self._nonfinite_this_step += 1
        n = self._nonfinite_in_a_row
        logger.warning("step %d: NaN or inf gradient; optimizer step skipped (%d in a row)", self.step_count + 1, n)
        if n >= self.config.max_nonfinite_steps:
            raise NonFiniteError(
                f"the loss or gradient was NaN or inf in {n} optimizer steps in a row (step {self.step_count + 1}); "
                "the weights are the last finite ones. Likely causes: rewards that are NaN, inf or huge, a learning "
                "rate too high for this model, or 16-bit overflow; check the reward functions and the environment, "
                "lower --learning_rate, or train in float32"
            )

    def log(self, metrics: dict[str, float]) -> None:
        """Append a row to metrics.jsonl (main process only) and send it to the trackers, at its ``step``."""
        self.start_run()
        if self.logger is not None:
            self.logger.log(metrics)
        if self._tracking:  # a NaN (a statistic of no scored token) is left out rather than plotted
            step = int(metrics.get("step", self.step_count))
            self.accelerator.log({k: v for k, v in metrics.items() if k != "step" and v == v}, step=step)

    def save(self, directory: str | Path | None = None, **kwargs) -> Path | None:
        """Save the policy (safetensors) to ``directory`` (default ``<output_dir>/policy``), atomically;
        ``kwargs`` go to the policy's own saver (``merged=`` for a LoRA language model). When this
        step was just checkpointed with the same weights, the weight files are hard links to the
        checkpoint's: the final model is on disk once."""
        directory = Path(directory) if directory else (self.output_dir / "policy" if self.output_dir else None)
        if directory is None:
            raise ValueError("GRPOTrainer.save needs a directory when GRPOConfig.output_dir is None")
        self.start_run()
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            self._check_finite_weights(directory)
            same = ckpt.checkpoint_dir(self.output_dir, self.step_count) / "policy" if self.output_dir else None
            merging = getattr(self.policy, "has_adapters", False) and kwargs.get("merged", True)
            if same is not None and same.is_dir() and self._checkpointed_step == self.step_count and not merging:
                link_folder(same, directory)  # the weights of this step are on disk already: link, not copy
            else:
                save_policy(self.policy, directory, **kwargs)
        return directory

    def _check_finite_weights(self, target: Path) -> None:
        """Weights holding NaN or inf are never saved: :class:`NonFiniteError` instead; nor are
        diverged ones (:meth:`_check_divergence`): :class:`DivergedError`."""
        if self.diverged_at is not None:
            raise DivergedError(f"not saving {target}: the policy's weights diverged at step {self.diverged_at}; "
                                "the last checkpoint before it holds the last sane ones")
        bad = [name for name, p in self.policy.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            raise NonFiniteError(f"not saving {target}: the policy's weights hold NaN or inf ({', '.join(bad[:3])}"
                                 f"{', ...' if len(bad) > 3 else ''}); the last checkpoint holds the last finite ones")

    # -- checkpoints -------------------------------------------------------------------------------

    def save_checkpoint(self, extra: dict[str, Any] | Callable[[], dict[str, Any]] | None = None) -> Path:
        """Write ``<output_dir>/checkpoints/step_XXXXXXXX/`` (:func:`grpo_seq.checkpoint.write_checkpoint`)
        and keep the newest ``save_total_limit``. ``extra``: the caller's own JSON-able state
        (a recipe's evaluation schedule, ...), returned by :meth:`resume`. Call it on every process:
        each contributes its RNG and sampler state, the main process writes."""
        if self.output_dir is None:
            raise ValueError("GRPOTrainer.save_checkpoint needs GRPOConfig.output_dir")
        self.start_run()
        acc = self.accelerator
        rng_states = gather_object([{
            "global": ckpt.rng_state(), "shuffle": ckpt.generator_state(self.shuffle_gen),
            "sampler": self.sampler.state_dict() if hasattr(self.sampler, "state_dict") else None,
        }])
        target = ckpt.checkpoint_dir(self.output_dir, self.step_count)
        if acc.is_main_process:
            self._check_finite_weights(target)
            moving = self.config.ref_sync_steps or self.config.sync_ref_model
            moving_ref = self.ref_policy if moving else None  # else: the initial policy
            self._checkpointed_step = self.step_count
            ckpt.write_checkpoint(
                self.output_dir, self.step_count, policy=self.policy,
                optimizer_state=self.optimizer.state_dict() if self.config.save_optimizer else None,
                trainer_state={"step": self.step_count, "env_steps": self.env_steps, "num_processes": acc.num_processes,
                               "signal": dataclasses.asdict(self.signal),
                               "entropy_control": dataclasses.asdict(self.entropy_control),
                               "config": self.config.to_dict(), "extra": extra() if callable(extra) else (extra or {})},
                rng_states=rng_states, ref_policy=moving_ref, keep=self.config.save_total_limit,
            )
        acc.wait_for_everyone()
        return target

    def maybe_save_checkpoint(self, extra: dict[str, Any] | Callable[[], dict[str, Any]] | None = None) -> Path | None:
        """:meth:`save_checkpoint` when the step count is a multiple of ``save_steps``."""
        every = self.config.save_steps
        if every and self.output_dir is not None and self.step_count % every == 0:
            return self.save_checkpoint(extra)
        return None

    def resume(self, path: str | Path) -> dict[str, Any]:
        """Restore a checkpoint (a checkpoint folder, or a run folder's newest complete one):
        weights, optimizer, counters, every RNG and the sampler's position, so the run goes on
        exactly as if it had never stopped. Rows of metrics.jsonl logged after the checkpoint
        are dropped (they will be logged again). Returns the ``extra`` state saved with it."""
        acc = self.accelerator
        same = self._resume_folder is not None and str(path) == str(self.config.resume_from)
        try:
            folder = self._resume_folder if same else ckpt.resolve_checkpoint(path)
            self._check_resumable(folder, ckpt.read_json(folder / "trainer_state.json"))
            state, optimizer_state, rng = ckpt.load_checkpoint(folder, self.policy, self.ref_policy, acc.process_index)
        except ckpt.CheckpointError:
            self.close()  # refused: the run folder is not this run's to keep locked
            raise
        if isinstance(state.get("signal"), dict):
            self.signal = SignalWatch(**state["signal"])
        if isinstance(state.get("entropy_control"), dict):
            self.entropy_control = EntropyControl(**state["entropy_control"])
        if optimizer_state is None:
            logger.warning("%s holds no optimizer state (saved with save_optimizer=False): Adam's moments start "
                           "afresh, so this run will not repeat the uninterrupted one exactly", folder)
        else:
            try:
                self.optimizer.load_state_dict(optimizer_state)
            except (ValueError, KeyError) as e:
                raise ckpt.CheckpointError(f"checkpoint {folder}: optimizer.pt does not fit this policy's parameters: {e}") from None
        self.step_count, self.env_steps = int(state["step"]), int(state["env_steps"])
        self._last_norm = None  # the weights were just loaded
        if rng is not None:
            ckpt.set_rng_state(rng["global"])
            ckpt.set_generator_state(self.shuffle_gen, rng["shuffle"])
            if rng.get("sampler") is not None and hasattr(self.sampler, "load_state_dict"):
                self.sampler.load_state_dict(rng["sampler"])
        else:
            logger.warning(
                "%s has no RNG state for process %d (it was written by %d processes): this process starts fresh "
                "random streams, so the run will not repeat the uninterrupted one exactly",
                folder, acc.process_index, state.get("num_processes", 1),
            )
        if self._lock is not None and self.output_dir.resolve() == ckpt.run_dir_of(folder).resolve():
            self._foreign_run = []  # the run this folder holds is the one resumed
        self.start_run()
        if self.logger is not None:
            self.logger.truncate_after(self.step_count)
        acc.wait_for_everyone()
        return state.get("extra") or {}

    def _check_resumable(self, folder: Path, state: Any) -> None:
        """Refuse a checkpoint trained with other options than this run's, except those the config
        lists in ``RESUME_MAY_CHANGE`` (budgets, logging, saving), which are printed as changed."""
        saved = state.get("config") if isinstance(state, dict) else None
        if not isinstance(saved, dict):
            return  # a checkpoint without its config (written by hand): nothing to compare
        mine = json.loads(json.dumps(self.config.to_dict()))  # tuples as lists, as the file has them
        changed = {k: (saved[k], v) for k, v in mine.items() if k in saved and saved[k] != v}
        may_change = type(self.config).RESUME_MAY_CHANGE
        refused = {k: v for k, v in changed.items() if k not in may_change}
        if refused:
            raise ckpt.CheckpointError(
                f"--resume_from {folder}: the checkpoint was trained with other options: "
                + "; ".join(f"--{k} was {a!r}, is {b!r} now" for k, (a, b) in refused.items())
                + ". Resume with the run's own values (its config.json), or start a new run"
            )
        allowed = {k: v for k, v in changed.items() if k not in ("resume_from", "output_dir", "overwrite")}
        if allowed and self.accelerator.is_main_process:
            print("resuming with changed options: " + "; ".join(f"--{k} {a!r} -> {b!r}" for k, (a, b) in allowed.items()),
                  flush=True)

    def close(self) -> None:
        """Close metrics.jsonl and the trackers, and release the run folder."""
        if self._lock is not None:
            self._lock.release()
        if self.logger is not None:
            self.logger.close()
        if self._tracking:
            self.accelerator.end_training()
