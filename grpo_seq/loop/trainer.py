"""The GRPO loop under accelerate: collect -> advantages -> score pi_old and pi_ref -> update -> log.

The trainer never looks inside the batch beyond tokens, mask, rewards and groups: a policy
scores its own batch (``policy(batch) -> (logp_t, entropy_t)``), a sampler draws it, so the same
loop trains a language model or a CartPole agent. What each phase does lives in
:mod:`grpo_seq.loop`: the update, the scoring, the guards, the metrics, the run folder and the
checkpoints; this file is the loop that calls them, in order.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
import time
from pathlib import Path
from typing import Any, Callable

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import Tensor, nn

from ..io import checkpoint as ckpt
from ..math.advantages import compute_advantages, shared_advantages
from ..math.batch import RolloutBatch
from .clock import device_clock
from .config import LoopConfig
from .diagnostics import SignalWatch
from .dynamic_sampling import concat_groups, fill_informative
from .entropy_control import EntropyControl
from ..errors import ConfigError
from . import checkpointing
from .guards import WeightGuard
from .run_folder import RunFolder
from .logprobs import Scoring
from .step_metrics import step_metrics
from .update import PolicyUpdate, UpdateStats, adamw
from ..sampling.base import Budgeted, GroupSampler

__all__ = ["GRPOLoop", "compute_advantages"]

logger = logging.getLogger(__name__)

ScoreFn = Callable[[RolloutBatch], RolloutBatch]


def _ask_for_entropy_grad(config: LoopConfig, policy: nn.Module) -> None:
    """An objective with an entropy term (ent_coef, adaptive entropy) needs the policy's entropy
    with a gradient: a policy that computes it only on request (``enable_entropy_grad``, a
    language model) is asked; one that cannot give it is refused."""
    has_grad = lambda: getattr(policy, "entropy_has_grad", False)  # noqa: E731
    if not (config.ent_coef > 0 or config.use_adaptive_entropy) or has_grad():
        return
    if hasattr(policy, "enable_entropy_grad"):
        policy.enable_entropy_grad()
    if not has_grad():
        raise ConfigError(f"LoopConfig.ent_coef={config.ent_coef}: {type(policy).__name__} gives no entropy with a "
                          "gradient; set ent_coef to 0 and use_adaptive_entropy to false")


class GRPOLoop:
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
        make_optimizer: builds the optimizer over the trainable parameters; AdamW with the
            config's settings when omitted.
    """

    def __init__(self, config: LoopConfig, policy: nn.Module, sampler: GroupSampler,
                 accelerator: Accelerator | None = None, score_fn: ScoreFn | None = None,
                 make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None):
        if sampler.num_generations != config.num_generations or sampler.num_groups != config.num_groups:
            raise ValueError(
                f"sampler draws {sampler.num_groups} groups of {sampler.num_generations} but LoopConfig says "
                f"num_groups={config.num_groups}, num_generations={config.num_generations}"
            )
        _ask_for_entropy_grad(config, policy)
        self.config, self.sampler, self.score_fn = config, sampler, score_fn
        # A missing or damaged --resume_from is refused before anything is created or written.
        self._resume_folder = ckpt.resolve_checkpoint(config.resume_from) if config.resume_from else None
        self.accelerator = accelerator or Accelerator()
        set_seed(config.seed)
        self.shuffle_gen = torch.Generator().manual_seed(config.seed)
        self.scoring = Scoring(config, self.accelerator, policy)
        params = [p for p in policy.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the policy has no trainable parameters")
        if make_optimizer is not None:  # the caller's (a Stable-Baselines3 optimizer_class), over the trainable parameters
            optimizer = make_optimizer(params)
        else:
            optimizer = adamw(params, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                              eps=config.adam_eps, weight_decay=config.weight_decay)
        self.model, self.optimizer = self.accelerator.prepare(policy, optimizer)
        self._bare_policy = self.accelerator.unwrap_model(self.model)
        self.step_count = 0
        # the tokens the sampler drew, dropped groups included: an env agent's env steps (one action
        # each), a language model's completion tokens
        self.tokens_sampled = 0
        self.checkpointed_step: int | None = None  # the step of the checkpoint this process wrote last
        self.last_batch: RolloutBatch | None = None
        self.resumed_from: Path | None = None  # the checkpoint :meth:`resume` restored
        self.signal = SignalWatch()  # says so, once, when most groups carry no signal for a while
        self._unseen_tokens = 0  # tokens this step drew in groups that dynamic sampling dropped
        self.output_dir = RunFolder.path_of(config.output_dir)
        self.guard = WeightGuard(config, params, self.output_dir)
        self.update = PolicyUpdate(config, self.accelerator, self.model, self.optimizer, self._bare_policy, params,
                                   self.shuffle_gen, EntropyControl.from_config(config), self.guard)
        # last: the folder is locked (and a finished run in it replaced) only once all else is built
        self.run_folder = RunFolder(config.output_dir, config.overwrite, self.accelerator, config.to_dict(),
                                    self._resume_folder)

    @property
    def policy(self) -> nn.Module:
        """The bare policy (without a DDP wrapper), for sampling, evaluation and saving."""
        return self._bare_policy

    @property
    def ref_policy(self) -> nn.Module | None:
        """The reference policy (beta > 0, not LoRA), or None."""
        return self.scoring.ref_policy

    @property
    def entropy_control(self) -> EntropyControl:
        return self.update.entropy_control

    @entropy_control.setter
    def entropy_control(self, value: EntropyControl) -> None:
        self.update.entropy_control = value

    @property
    def diverged_at(self) -> int | None:
        """The step whose update diverged (:class:`grpo_seq.errors.DivergedError`), or None."""
        return self.guard.diverged_at

    def start_run(self) -> None:
        """Before this run's first write: refuse a folder holding another run; write config.json
        and open metrics.jsonl (main process)."""
        self.run_folder.start(self.config.to_dict())

    # -- one step ----------------------------------------------------------------------------------

    def step(self, progress: float | None = None, learning_rate: float | None = None,
             epsilon: float | None = None) -> dict[str, float]:
        """One iteration: collect groups, compute advantages, score pi_old and pi_ref, ``mu`` update
        passes, log.

        Args:
            progress: fraction of the run done, in [0, 1]; drives ``lr_schedule='linear'``.
            learning_rate, epsilon: this step's learning rate and clip range, where the caller
                follows a schedule of its own (a Stable-Baselines3 schedule); the config's otherwise.

        Returns the step's metrics (averaged over processes), also appended to metrics.jsonl.
        """
        self.start_run()
        device = self.accelerator.device
        t0 = device_clock(device)
        batch = self._collect()
        t_sample = device_clock(device) - t0
        self.scoring.score_ref(self.policy, batch)
        batch.advantages = self.scoring.advantages(self.policy, batch, getattr(self.score_fn, "weights", None))
        train = self._for_loss(self._with_extra_sequences(batch))
        live = self._rows_with_gradient(train)
        self.scoring.score_old(self.policy, train, live)
        t_scored = device_clock(device)
        self.last_batch = batch
        lr = self.update.set_lr(progress, learning_rate)
        stats = self.update.run(train, live, self.step_count, epsilon)
        t_updated = device_clock(device)
        self.guard.check_collapse(self.policy, train, live, stats, self.step_count)
        self.step_count += 1
        self.scoring.sync_reference(self.policy, self.step_count)
        metrics = self._metrics(batch, live, stats, lr, t0, {
            "perf/sample_seconds": t_sample, "perf/score_seconds": t_scored - t0 - t_sample,
            "perf/backward_seconds": t_updated - t_scored - self.update.optimizer_seconds,
            "perf/optimizer_seconds": self.update.optimizer_seconds})
        self.log(metrics)
        return metrics

    def _collect(self) -> RolloutBatch:
        """The step's groups (:meth:`_draw`); with ``dynamic_sampling`` only groups whose rewards
        differ, drawn again while too few (:func:`grpo_seq.loop.dynamic_sampling.fill_informative`)."""
        cfg = self.config
        if not cfg.dynamic_sampling:
            return self._draw()
        budget = self.sampler.step_budget if isinstance(self.sampler, Budgeted) else None
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
        if (batch.batch_size, batch.num_generations) != expected:
            raise ValueError(
                f"{type(self.sampler).__name__}.sample returned {batch.batch_size} outputs in groups of "
                f"{batch.num_generations}; LoopConfig asks for num_groups={cfg.num_groups} x num_generations="
                f"{cfg.num_generations} = {expected[0]} outputs in groups of {expected[1]}"
            )
        if batch.extra is not None and cfg.dynamic_sampling:
            raise ConfigError(f"LoopConfig.dynamic_sampling: {type(self.sampler).__name__} made several sequences of "
                              "one output (an agent whose history was rewritten), which dynamic sampling cannot keep "
                              "together; set it to false")
        if self.score_fn is not None:
            batch = self.score_fn(batch)
        return batch.to(acc.device)

    def _with_extra_sequences(self, batch: RolloutBatch) -> RolloutBatch:
        """The batch with the more sequences its outputs made (``batch.extra``: an agent whose
        harness rewrote its history) as rows of their own, each with the advantage of its output
        (:func:`grpo_seq.math.advantages.shared_advantages`) and its reference log-probs; the
        step's metrics stay those of the outputs."""
        if batch.extra is None:
            return batch
        extra = batch.extra
        self.scoring.score_ref(self.policy, extra)
        extra.advantages = shared_advantages(batch.advantages, batch.mask, batch.extra_of, extra.mask)
        joined = concat_groups([dataclasses.replace(batch, extra=None, extra_of=None), extra], partial=True)
        return dataclasses.replace(joined, group=torch.cat([batch.group, batch.group[batch.extra_of]]))

    def _for_loss(self, batch: RolloutBatch) -> RolloutBatch:
        """The batch the loss sees: with ``mask_truncated_completions`` the outputs cut off at the
        length limit keep their place (and their group's advantages) but no token in the loss."""
        if not self.config.mask_truncated_completions:
            return batch
        if batch.truncated is None:
            raise ConfigError(f"LoopConfig.mask_truncated_completions: {type(self.sampler).__name__} marks no output as "
                              "truncated (batch.truncated); set it to false")
        return dataclasses.replace(batch, mask=batch.mask & ~batch.truncated.bool()[:, None])

    def _rows_with_gradient(self, batch: RolloutBatch) -> Tensor:
        """``(B,)`` bool: the outputs whose loss has a gradient. With beta = 0 the loss of a token is
        ``-min(r A, clip(r) A)``, exactly 0 with a zero gradient where A = 0: an output with A = 0 at
        every token (a group whose rewards are all equal) needs no forward or backward pass (unless
        an entropy bonus gives every token a gradient). The loss keeps the whole batch's counts in
        its denominators, so the update does not change."""
        cfg = self.config
        # a token mean of the entropy, or its quantile, covers zero-advantage tokens too
        entropy_free = cfg.ent_coef == 0 and not self.entropy_control.active and cfg.top_entropy_quantile == 1.0
        if cfg.skip_zero_advantage and cfg.beta == 0 and entropy_free:
            return ((batch.advantages != 0) & batch.mask).any(-1)
        return torch.ones(batch.batch_size, dtype=torch.bool, device=batch.tokens.device)

    def _metrics(self, batch: RolloutBatch, live: Tensor, stats: UpdateStats, lr: float, t0: float,
                 phases: dict[str, float]) -> dict[str, float]:
        """The step's metrics (:func:`grpo_seq.loop.step_metrics.step_metrics`), the counters, where
        the step's time went, and the no-signal watch."""
        acc = self.accelerator
        metrics, grouped, identical, tokens = step_metrics(
            acc, batch, live, stats, ragged=self.config.dynamic_sampling,
            nonfinite_steps=self.guard.nonfinite_this_step, correction=self.update.correction)
        if self.entropy_control.active:
            metrics["policy/entropy_coef"] = self.entropy_control.applied()
        if self.config.dynamic_sampling:  # the dropped groups' steps were sampled too
            tokens += int(acc.reduce(torch.tensor([float(self._unseen_tokens)], device=acc.device), "sum")[0])
        self.tokens_sampled += tokens
        seconds = time.perf_counter() - t0
        metrics.update({
            "step": self.step_count, "perf/tokens_total": self.tokens_sampled, "perf/lr": lr,
            "perf/step_seconds": seconds, "perf/sample_seconds": phases.pop("perf/sample_seconds"),
            "perf/tokens_per_second": tokens / seconds,
            "perf/samples_per_second": batch.batch_size * acc.num_processes / seconds,
            "perf/peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "perf/torch_threads": torch.get_num_threads(), **phases,
        })
        if self.signal.update(grouped.tolist(), identical.tolist()):
            logger.warning("%s", self.signal.message)
        metrics["reward/flat_steps_in_a_row"] = float(self.signal.flat_in_a_row)
        return metrics

    def log(self, metrics: dict[str, float]) -> None:
        """Append a row to metrics.jsonl (main process only) and send it to the trackers, at its ``step``."""
        self.start_run()
        self.run_folder.log(metrics, int(metrics.get("step", self.step_count)))

    # -- saving ------------------------------------------------------------------------------------

    def save(self, directory: str | Path | None = None, **kwargs) -> Path | None:
        """Save the policy (safetensors) to ``directory`` (default ``<output_dir>/policy``), atomically;
        ``kwargs`` go to the policy's own saver (``merged=`` for a LoRA language model). Weights
        that diverged or hold NaN are refused (:class:`grpo_seq.loop.guards.WeightGuard`)."""
        directory = Path(directory) if directory else (self.output_dir / "policy" if self.output_dir else None)
        if directory is None:
            raise ValueError("GRPOLoop.save needs a directory when LoopConfig.output_dir is None")
        self.start_run()
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            checkpointing.save_policy_folder(self, directory, **kwargs)
        return directory

    def save_checkpoint(self, extra: checkpointing.Extra = None) -> Path:
        """Write ``<output_dir>/checkpoints/step_XXXXXXXX/`` (:func:`grpo_seq.loop.checkpointing.save_checkpoint`).
        ``extra``: the caller's own JSON-able state (a recipe's evaluation schedule, ...), returned
        by :meth:`resume`. Call it on every process: each contributes its RNG and sampler state."""
        if self.output_dir is None:
            raise ValueError("GRPOLoop.save_checkpoint needs LoopConfig.output_dir")
        self.start_run()
        return checkpointing.save_checkpoint(self, extra)

    def maybe_save_checkpoint(self, extra: checkpointing.Extra = None) -> Path | None:
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
        same = self._resume_folder is not None and str(path) == str(self.config.resume_from)
        try:
            folder = self._resume_folder if same else ckpt.resolve_checkpoint(path)
            extra = checkpointing.resume(self, folder)
        except ckpt.CheckpointError:
            self.close()  # refused: the run folder is not this run's to keep locked
            raise
        self.run_folder.adopt(folder)
        self.resumed_from = Path(folder)
        self.start_run()
        if self.run_folder.logger is not None:
            self.run_folder.logger.truncate_after(self.step_count)
        self.accelerator.wait_for_everyone()
        return extra

    def close(self) -> None:
        """Close metrics.jsonl and the trackers, and release the run folder."""
        self.run_folder.close()
