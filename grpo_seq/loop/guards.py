"""What stops a run before it saves bad weights: a weight norm that explodes, a policy that
collapses to determinism in one step, and NaN or inf gradients many steps in a row."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ..io import checkpoint as ckpt
from ..math.batch import RolloutBatch
from .config import LoopConfig
from .diagnostics import weight_growth, weight_norm
from ..errors import DivergedError, NonFiniteError
from ..math.objective import aggregate

if TYPE_CHECKING:
    from .update import UpdateStats

__all__ = ["WeightGuard", "EXPLORING_ENTROPY", "COLLAPSED_ENTROPY", "COLLAPSE_MIN_TOKENS"]

logger = logging.getLogger(__name__)

# A policy exploring at least this much (nats per token) that falls below COLLAPSED_ENTROPY in one
# step has collapsed (WeightGuard.check_collapse).
EXPLORING_ENTROPY = 0.1
COLLAPSED_ENTROPY = 1e-6
COLLAPSE_MIN_TOKENS = 16


class WeightGuard:
    """Watches the trained weights of one run.

    ``diverged_at`` is the step whose update diverged (:class:`DivergedError`): nothing is saved
    after it. ``nonfinite_this_step`` counts the optimizer steps skipped this step for a NaN or
    inf gradient norm."""

    def __init__(self, config: LoopConfig, params: list[nn.Parameter], output_dir: Path | None):
        self.config, self.params, self.output_dir = config, params, output_dir
        self.num_weights = sum(p.numel() for p in params)
        self.start_norm: float | None = None  # the weights' norm before this process's first update
        self.last_norm: float | None = None  # the norm after the last optimizer step (None: measure afresh)
        self.diverged_at: int | None = None
        self.nonfinite_in_a_row = self.nonfinite_this_step = 0

    def norm_before(self) -> float:
        """The weights' norm before an optimizer step: only the optimizer moves them between its
        steps, so the norm after the last one is the one before this."""
        return self.last_norm if self.last_norm is not None else weight_norm(self.params)

    def check_divergence(self, norm_before: float, step: int) -> None:
        """Raise :class:`DivergedError` when the optimizer step just taken (during step ``step + 1``)
        multiplied the weights' global norm by more than ``divergence_factor``
        (:func:`grpo_seq.loop.diagnostics.weight_growth`). The norm is global and the weights equal on
        every process, so all stop together."""
        norm_after = self.last_norm = weight_norm(self.params)
        if self.start_norm is None:
            self.start_norm = norm_before
        growth = weight_growth(norm_before, norm_after, self.num_weights)
        # A rate too high for one step to show (each step adds about lr per weight) piles up: measured
        # from the start as well, the same factor catches it some steps later.
        since_start = weight_growth(self.start_norm, norm_after, self.num_weights)
        factor = self.config.divergence_factor
        if growth <= factor and since_start <= factor:  # NaN fails the tests: diverged too
            return
        self.diverged_at = step + 1
        if not growth <= factor:
            what = f"{growth:.3g}-fold in one optimizer step ({norm_before:.3g} -> {norm_after:.3g})"
        else:
            what = f"{since_start:.3g}-fold since this run's first update here ({self.start_norm:.3g} -> {norm_after:.3g})"
        raise DivergedError(self.message(f"the weights' norm grew {what}"))

    @torch.no_grad()
    def check_collapse(self, policy: nn.Module, batch: RolloutBatch, live: Tensor, stats: UpdateStats,
                       step: int) -> None:
        """Raise :class:`DivergedError` when step ``step + 1`` turned a policy that still explored
        into a deterministic one: its mean entropy over the tokens just trained (``stats``; none
        trained: nothing to check) fell below ``COLLAPSED_ENTROPY`` nats from at least
        ``EXPLORING_ENTROPY`` and half a uniform policy's (``uniform_entropy``, where the policy
        says it). Healthy learning lowers the entropy over many optimizer steps; a learning rate
        far too high does it in one, from a policy that has learned little, and the run would then
        go on with every group's members alike. A policy already mostly sure of a task it has
        learned may rightly become sure in one step (a big torso's one Adam step moves its outputs
        far). Checked where the step took one optimizer step: a step of several passes of
        minibatches (the Stable-Baselines3 door's ``n_epochs`` x ``n_steps / batch_size``, hundreds)
        rightly makes a policy that has learned its task sure, and the weights' norm still catches a
        rate that blows them up there. Checked for policies small enough that the extra forward pass
        costs nothing (not language models, which save themselves with ``save_to``)."""
        if (self.config.divergence_factor == 0 or hasattr(policy, "save_to") or not stats.tokens
                or len(stats.losses) != 1):
            return
        entropy_before = float(stats.token_sums["entropy"] / stats.tokens)
        if entropy_before < max(EXPLORING_ENTROPY, 0.5 * getattr(policy, "uniform_entropy", 0.0)):
            return
        sub = batch.select(torch.arange(batch.batch_size, device=batch.tokens.device)[live])
        if sub.mask.sum() < COLLAPSE_MIN_TOKENS or sub.mask.sum() < 4 * sub.batch_size:
            return  # too few decisions to tell, or one-decision outputs (alternatives), which may rightly be sure
        policy.eval()
        entropy_t = policy(sub, with_entropy=True)[1]
        after = float(aggregate(entropy_t.float(), sub.mask, "bnpo"))
        if after < COLLAPSED_ENTROPY:
            self.diverged_at = step + 1
            raise DivergedError(self.message(
                f"the policy collapsed to determinism in one step (its entropy fell from {entropy_before:.3g} to "
                f"{after:.2g} nats per token)"))

    def message(self, what: str) -> str:
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

    def count_nonfinite(self, finite: bool, step: int) -> None:
        """Count a skipped optimizer step; ``max_nonfinite_steps`` of them in a row raise
        :class:`NonFiniteError`."""
        if finite:
            self.nonfinite_in_a_row = 0
            return
        self.nonfinite_in_a_row += 1
        self.nonfinite_this_step += 1
        n = self.nonfinite_in_a_row
        logger.warning("step %d: NaN or inf gradient; optimizer step skipped (%d in a row)", step + 1, n)
        if n >= self.config.max_nonfinite_steps:
            raise NonFiniteError(
                f"the loss or gradient was NaN or inf in {n} optimizer steps in a row (step {step + 1}); "
                "the weights are the last finite ones. Likely causes: rewards that are NaN, inf or huge, a learning "
                "rate too high for this model, or 16-bit overflow; check the reward functions and the environment, "
                "lower --learning_rate, or train in float32"
            )

    def check_saveable(self, policy: nn.Module, target: Path) -> None:
        """Weights holding NaN or inf are never saved: :class:`NonFiniteError` instead; nor are
        diverged ones: :class:`DivergedError`."""
        if self.diverged_at is not None:
            raise DivergedError(f"not saving {target}: the policy's weights diverged at step {self.diverged_at}; "
                                "the last checkpoint before it holds the last sane ones")
        # a finite sum has no NaN or inf in it (either would carry into the sum), and costs no copy
        # of the weights; a sum that is not finite may be an overflow of finite ones: then each one
        bad = [name for name, p in policy.named_parameters()
               if not bool(torch.isfinite(p.detach().sum())) and not bool(torch.isfinite(p).all())]
        if bad:
            raise NonFiniteError(f"not saving {target}: the policy's weights hold NaN or inf ({', '.join(bad[:3])}"
                                 f"{', ...' if len(bad) > 3 else ''}); the last checkpoint holds the last finite ones")
