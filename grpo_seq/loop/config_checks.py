"""The checks :class:`grpo_seq.loop.config.LoopConfig` runs on construction, by what they cover:
each bad value is a :class:`~grpo_seq.errors.ConfigError` naming the option, what it must be and
what it got."""

from __future__ import annotations

import math
import warnings
from dataclasses import fields
from typing import NoReturn

from ..errors import ConfigError
from ..math.objective import IS_LEVELS, KL_ESTIMATORS, LOSS_TYPES, REDUCTIONS

__all__ = ["ConfigChecks", "ADVANTAGE_TYPES", "token_minibatch_conflict"]

ADVANTAGE_TYPES = ("outcome", "process", "stepwise")
LR_SCHEDULES = ("constant", "linear")
SCALE_LEVELS = ("group", "batch", "none")
ENT_MEANS = ("loss", "token")
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")


def token_minibatch_conflict(loss_type: str, importance_sampling_level: str,
                             off_policy_mask_threshold: float | None) -> str | None:
    """Why a loss with these options cannot be split into minibatches of tokens (``minibatch_tokens``),
    or None where every term of it is one token's and it can."""
    if REDUCTIONS.get(loss_type) not in ("bnpo", "dapo"):
        return (f"needs a token-mean loss (bnpo, dapo, cispo, vespo): loss_type={loss_type} averages each output "
                "over its own tokens, which a minibatch of tokens cuts")
    if importance_sampling_level == "sequence":
        return "needs importance_sampling_level=token: a sequence-level ratio (GSPO) is a mean over the whole output"
    if off_policy_mask_threshold is not None:
        return "cannot be used with off_policy_mask_threshold, which masks whole outputs by their mean log ratio"
    return None



class ConfigChecks:
    """The validation half of the config (a mixin: the fields live on the config itself)."""

    def _fail(self, name: str, why: str) -> NoReturn:
        raise ConfigError(f"LoopConfig.{name}: {why}, got {getattr(self, name)!r}")

    def _check_finite(self) -> None:
        for f in fields(self):  # NaN and inf pass most comparisons: no float option may hold them
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                self._fail(f.name, "must be a finite number")

    def _check_batch_and_optimizer(self) -> None:
        """Group shape, Adam and its learning rate, non-finite steps, gradient clipping."""
        if self.num_generations < 2:
            self._fail("num_generations", "a group needs at least 2 outputs to compare (G >= 2)")
        if self.num_groups < 1:
            self._fail("num_groups", "must be >= 1")
        if not self.learning_rate > 0:
            self._fail("learning_rate", "must be > 0")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0 <= getattr(self, name) < 1:
                self._fail(name, "must be in [0, 1)")
        if self.lr_schedule not in LR_SCHEDULES:
            self._fail("lr_schedule", f"must be one of {LR_SCHEDULES}")
        if not self.adam_eps > 0:
            self._fail("adam_eps", "must be > 0 (Adam divides by sqrt(v) + eps, and v is 0 where a gradient is 0)")
        if self.weight_decay < 0:
            self._fail("weight_decay", "must be >= 0")
        if self.max_nonfinite_steps < 1:
            self._fail("max_nonfinite_steps", "must be >= 1")
        if self.max_grad_norm < 0:
            self._fail("max_grad_norm", "must be >= 0 (0 disables clipping)")
        if self.divergence_factor != 0 and not self.divergence_factor > 1:
            self._fail("divergence_factor", "must be > 1, or 0 to turn the check off")

    def _check_update(self) -> None:
        """How a sampled batch is split into optimizer steps and passes."""
        if self.mu < 1:
            self._fail("mu", "must be >= 1")
        if not self.target_kl >= 0:
            self._fail("target_kl", "must be >= 0 (0: every pass runs)")
        if self.num_minibatches < 1:
            self._fail("num_minibatches", "must be >= 1")
        if (self.num_groups * self.num_generations) % self.num_minibatches:
            self._fail(
                "num_minibatches",
                f"must divide the {self.num_groups * self.num_generations} outputs per step "
                f"(num_groups={self.num_groups} x num_generations={self.num_generations})",
            )
        if self.micro_batch_size < 0:
            self._fail("micro_batch_size", "must be >= 0 (0: the whole minibatch in one pass)")

    def _check_token_minibatches(self) -> None:
        """``minibatch_tokens`` splits outputs: only a loss whose every term is one token's can be cut so."""
        if self.minibatch_tokens < 0:
            self._fail("minibatch_tokens", "must be >= 0 (0: minibatches of whole outputs)")
        if not self.minibatch_tokens:
            return
        if self.num_minibatches != 1:
            self._fail("minibatch_tokens", "splits the batch by tokens and num_minibatches by outputs: set one "
                       "(num_minibatches=1)")
        conflict = token_minibatch_conflict(self.loss_type, self.importance_sampling_level,
                                            self.off_policy_mask_threshold)
        if conflict:
            self._fail("minibatch_tokens", conflict)

    def _check_objective(self) -> None:
        """The clipped objective, its KL and entropy terms, the advantages."""
        if not 0 < self.epsilon < 1:
            self._fail("epsilon", "must be in (0, 1)")
        if self.epsilon_high is not None and not self.epsilon_high > 0:
            self._fail("epsilon_high", "must be > 0")
        if self.beta < 0:
            self._fail("beta", "must be >= 0")
        if self.ent_coef < 0:
            self._fail("ent_coef", "must be >= 0 (0: no entropy bonus)")
        if self.ref_sync_steps < 0:
            self._fail("ref_sync_steps", "must be >= 0")
        if not 0 < self.ref_sync_alpha <= 1:
            self._fail("ref_sync_alpha", "must be in (0, 1]")
        if self.ref_sync_steps and self.beta == 0:
            self._fail("ref_sync_steps", "needs beta > 0 (with beta = 0 there is no reference)")
        if self.ent_mean not in ENT_MEANS:
            self._fail("ent_mean", f"must be one of {ENT_MEANS}")
        if self.use_adaptive_entropy and self.ent_mean != "token":
            self._fail("use_adaptive_entropy", "adapts the token-mean bonus; set ent_mean=token")
        if self.loss_type not in LOSS_TYPES:
            self._fail("loss_type", f"must be one of {LOSS_TYPES}")
        if self.advantage not in ADVANTAGE_TYPES:
            self._fail("advantage", f"must be one of {ADVANTAGE_TYPES}")
        if not 0 < self.gamma <= 1:
            self._fail("gamma", "must be in (0, 1]")

    def _check_family(self) -> None:
        """The variants of the objective, the KL, the reference's moves and dynamic sampling."""
        for name, allowed in (("importance_sampling_level", IS_LEVELS), ("scale_rewards", SCALE_LEVELS),
                              ("multi_objective_aggregation", AGGREGATIONS), ("kl_estimator", KL_ESTIMATORS)):
            if getattr(self, name) not in allowed:
                self._fail(name, f"must be one of {allowed}")
        if self.delta is not None and self.loss_type in ("cispo", "sapo", "vespo"):
            self._fail("delta", f"bounds the clipped surrogate, which loss_type={self.loss_type} does not use; leave it None")
        if self.delta is not None and not self.delta > 1 + (self.epsilon if self.epsilon_high is None else self.epsilon_high):
            self._fail("delta", "must be > 1 + epsilon_high (the clip's upper bound), or None to turn it off")
        if self.loss_type == "cispo" and self.epsilon_high is None:
            self._fail("epsilon_high", "loss_type=cispo reads it as the weight ceiling eps_max (ScaleRL: 5.0); set it")
        for name in ("sapo_temperature_pos", "sapo_temperature_neg", "vespo_lambda_pos", "vespo_lambda_neg"):
            if not getattr(self, name) > 0:
                self._fail(name, "must be > 0")
        for name in ("vespo_k_pos", "vespo_k_neg", "ent_coef_min", "ent_coef_delta",
                     "entropy_target", "max_resample_rounds"):
            if getattr(self, name) < 0:
                self._fail(name, "must be >= 0")
        if self.step_advantage_w < 0:
            self._fail("step_advantage_w", "must be >= 0 (0: no step-level advantage)")
        if not 0 <= self.top_entropy_quantile <= 1:
            self._fail("top_entropy_quantile", "must be in [0, 1] (1 keeps every token)")
        if not self.ent_coef_min <= self.ent_coef_max:
            self._fail("ent_coef_max", "must be >= ent_coef_min")
        if self.off_policy_mask_threshold is not None and self.off_policy_mask_threshold < 0:
            self._fail("off_policy_mask_threshold", "must be >= 0, or None to turn the mask off")
        if self.kl_in_reward and self.beta == 0:
            self._fail("kl_in_reward", "needs beta > 0 (the KL's weight in the reward)")
        if self.kl_in_reward and self.multi_objective_aggregation != "sum_then_normalize":
            self._fail("kl_in_reward", "penalises the summed reward; it needs multi_objective_aggregation=sum_then_normalize")
        if self.scale_rewards == "batch" and self.advantage == "process":
            self._fail("scale_rewards", "batch normalises outcome rewards or returns-to-go; it needs "
                       "advantage=outcome or stepwise")
        if self.multi_objective_aggregation == "normalize_then_sum" and self.advantage != "outcome":
            self._fail("multi_objective_aggregation", "normalize_then_sum normalises outcome rewards; it needs "
                       "advantage=outcome")

    def _warn_mismatched(self) -> None:
        """Combinations that run but work against each other: a warning, not a refusal."""
        if self.importance_sampling_level == "sequence" and self.advantage != "outcome":
            warnings.warn(f"LoopConfig.importance_sampling_level: sequence (GSPO) gives each output one ratio, "
                          f"clipped as a whole, while advantage={self.advantage} gives each step its own advantage: the "
                          "output's mean log ratio then decides the clip for every step, whatever that step did. "
                          "importance_sampling_level=token keeps per-step credit", UserWarning, stacklevel=3)

    def _check_run(self) -> None:
        """The seed, trackers and checkpoints."""
        if not 0 <= self.seed < 2**32:  # numpy's legacy seeding (and so gymnasium's) takes 32 bits
            self._fail("seed", "must be in [0, 2**32 - 1]")
        if self.report_to:
            from ..io.tracking import tracker_kwargs

            try:
                tracker_kwargs(self.report_to, self.output_dir)
            except ValueError as e:
                raise ConfigError(f"LoopConfig.report_to: {e}") from None
        if self.save_steps < 0:
            self._fail("save_steps", "must be >= 0 (0: checkpoint only at the end and on a stop signal)")
        if self.save_total_limit < 0:
            self._fail("save_total_limit", "must be >= 0 (0: keep every checkpoint)")
