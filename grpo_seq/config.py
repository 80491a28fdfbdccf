"""GRPOConfig: every knob of the trainer, with its help text, validated on construction."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar, NoReturn

from .errors import ConfigError
from .objective import LOSS_TYPES

__all__ = ["GRPOConfig", "ADVANTAGE_TYPES"]

ADVANTAGE_TYPES = ("outcome", "process", "stepwise")
LR_SCHEDULES = ("constant", "linear")


@dataclass
class GRPOConfig:
    """Hyper-parameters of :class:`grpo_seq.GRPOTrainer`.

    Field help texts double as ``--help`` when parsed with ``transformers.HfArgumentParser``.
    """

    num_generations: int = field(
        default=8, metadata={"help": "G: outputs sampled per group (per prompt or env start state)."}
    )
    num_groups: int = field(
        default=8, metadata={"help": "Groups (prompts or start states) sampled per step on each process."}
    )
    learning_rate: float = field(default=1e-3, metadata={"help": "Adam learning rate."})
    lr_schedule: str = field(
        default="constant",
        metadata={"help": "Learning-rate schedule: constant, or linear decay to 0 over the run's progress."},
    )
    adam_beta1: float = field(
        default=0.9, metadata={"help": "Adam's decay rate of the gradient's running mean (momentum)."}
    )
    adam_beta2: float = field(
        default=0.999, metadata={"help": "Adam's decay rate of the squared gradient's running mean."}
    )
    adam_eps: float = field(default=1e-8, metadata={"help": "Adam epsilon."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    max_grad_norm: float = field(
        default=1.0, metadata={"help": "Clip the global gradient norm to this value; 0 disables clipping."}
    )
    mu: int = field(
        default=1,
        metadata={
            "help": "Policy updates per sampled batch (the paper's mu). With mu = 1 pi_old equals pi_theta "
            "and old log-probs are not computed; with mu > 1 they are kept from sampling time."
        },
    )
    num_minibatches: int = field(
        default=1, metadata={"help": "Optimizer steps per update pass: the batch's outputs are split this many ways."}
    )
    micro_batch_size: int = field(
        default=0,
        metadata={
            "help": "Outputs per forward/backward pass; gradients accumulate over a minibatch's micro-batches "
            "(exactly: the loss is normalised by the whole minibatch's counts). 0: the whole minibatch at once."
        },
    )
    skip_zero_advantage: bool = field(
        default=True,
        metadata={
            "help": "With beta = 0, an output whose advantage is 0 at every token (its group's rewards all equal) "
            "adds exactly nothing to the gradient: skip its forward and backward passes. The update is unchanged; "
            "the ratio, clip and entropy statistics then cover the trained outputs only. Has no effect with beta > 0 or ent_coef > 0."
        },
    )
    epsilon: float = field(default=0.2, metadata={"help": "Clipping range: ratio kept in [1-epsilon, 1+epsilon_high]."})
    epsilon_high: float | None = field(
        default=None, metadata={"help": "Upper clipping range (DAPO's clip-higher); defaults to epsilon."}
    )
    beta: float = field(
        default=0.04,
        metadata={"help": "KL coefficient against the frozen reference policy; 0 builds no reference at all."},
    )
    ent_coef: float = field(
        default=0.0,
        metadata={"help": "Entropy bonus: the objective adds ent_coef * the policy's entropy at each scored token, "
                  "aggregated as loss_type says (Stable-Baselines3's ent_coef). It keeps a policy from turning "
                  "deterministic before its group comparisons have told its actions apart. Needs a policy whose "
                  "entropy carries a gradient (the MLP policies); 0 turns it off."},
    )
    ref_sync_steps: int = field(
        default=0,
        metadata={"help": "Iterative RL: reset the reference to the current policy every this many steps (0: never)."},
    )
    loss_type: str = field(
        default="grpo",
        metadata={
            "help": "Loss aggregation: grpo (mean over each output's tokens, then over outputs: the paper), "
            "bnpo (token mean over the batch), dr_grpo (token sum / (outputs * max length))."
        },
    )
    advantage: str = field(
        default="outcome",
        metadata={
            "help": "outcome: (r - mean) / std of each output's total reward over its group. process: the "
            "paper's process supervision (step rewards normalised over the group, summed from t on). "
            "stepwise: returns-to-go compared with the group members still running at the same step."
        },
    )
    scale_rewards: bool = field(
        default=True, metadata={"help": "Divide advantages by the group std (False: Dr. GRPO, centring only)."}
    )
    gamma: float = field(default=1.0, metadata={"help": "Discount inside returns-to-go (advantage=stepwise only)."})
    absorb_ended: bool = field(
        default=False,
        metadata={
            "help": "advantage=stepwise: a member whose episode has ended stays in its group's comparison at later "
            "steps with return-to-go 0 (an absorbing state), so a member that runs on past the others is compared "
            "with stopping instead of with nobody (False: those steps get advantage 0 and are never trained)."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of every RNG (python, numpy, torch, the samplers)."})
    output_dir: str | None = field(
        default=None, metadata={"help": "Run folder for metrics.jsonl, config.json, checkpoints and the saved policy."}
    )
    report_to: list[str] = field(
        default_factory=list,
        metadata={"help": "Trackers besides metrics.jsonl, same metric names: tensorboard, wandb, trackio, mlflow, "
                  "comet_ml, aim, clearml, dvclive, swanlab (their package must be installed); none by default."},
    )
    save_steps: int = field(
        default=0,
        metadata={"help": "Write a checkpoint every this many steps (0: only at the end, and on SIGTERM or SIGINT)."},
    )
    save_total_limit: int = field(default=2, metadata={"help": "Keep the newest this many checkpoints (0: all)."})
    resume_from: str | None = field(
        default=None,
        metadata={"help": "Resume from a checkpoint folder, or from a run folder (its newest complete checkpoint; "
                  "a damaged one is refused and the one before it used)."},
    )
    overwrite: bool = field(
        default=False,
        metadata={"help": "Replace the run that output_dir already holds (its files are deleted, and listed); "
                  "without it such a folder is refused, unless this run resumes it."},
    )
    save_optimizer: bool = field(
        default=True,
        metadata={"help": "Keep the optimizer state in checkpoints (Adam: twice the trained weights' size). Without "
                  "it a resumed run starts Adam's moments afresh, so it no longer repeats the uninterrupted run."},
    )
    max_nonfinite_steps: int = field(
        default=3,
        metadata={"help": "A NaN or inf loss or gradient skips that optimizer step (counted in "
                  "loss/nonfinite_steps); this many in a row stop the run (the weights stay the last finite ones)."},
    )
    divergence_factor: float = field(
        default=1e3,
        metadata={"help": "Stop the run when one optimizer step multiplies the weights' global norm by more than this "
                  "(measured from a root-mean-square weight of at least 0.01): a learning rate orders of magnitude too "
                  "high. The diverged weights are never saved; the last checkpoint stays as it was. 0 turns the check off."},
    )

    # Options a resumed run may change: they change how the run is saved and logged, or how a
    # step is computed but not what it computes. Any other difference from the checkpoint's
    # config is refused by GRPOTrainer.resume. A recipe's config adds its own (budgets, evaluation).
    RESUME_MAY_CHANGE: ClassVar[frozenset[str]] = frozenset({
        "output_dir", "resume_from", "overwrite", "report_to", "save_steps", "save_total_limit", "micro_batch_size",
        "max_nonfinite_steps", "save_optimizer", "divergence_factor",
    })

    def __post_init__(self) -> None:
        self._check_finite()
        self._check_batch_and_optimizer()
        self._check_update()
        self._check_objective()
        self._check_run()

    def _fail(self, name: str, why: str) -> NoReturn:
        raise ConfigError(f"GRPOConfig.{name}: {why}, got {getattr(self, name)!r}")

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
        if self.loss_type not in LOSS_TYPES:
            self._fail("loss_type", f"must be one of {LOSS_TYPES}")
        if self.advantage not in ADVANTAGE_TYPES:
            self._fail("advantage", f"must be one of {ADVANTAGE_TYPES}")
        if not 0 < self.gamma <= 1:
            self._fail("gamma", "must be in (0, 1]")

    def _check_run(self) -> None:
        """The seed, trackers and checkpoints."""
        if not 0 <= self.seed < 2**32:  # numpy's legacy seeding (and so gymnasium's) takes 32 bits
            self._fail("seed", "must be in [0, 2**32 - 1]")
        if self.report_to:
            from .tracking import tracker_kwargs

            try:
                tracker_kwargs(self.report_to, self.output_dir)
            except ValueError as e:
                raise ConfigError(f"GRPOConfig.report_to: {e}") from None
        if self.save_steps < 0:
            self._fail("save_steps", "must be >= 0 (0: checkpoint only at the end and on a stop signal)")
        if self.save_total_limit < 0:
            self._fail("save_total_limit", "must be >= 0 (0: keep every checkpoint)")

    def to_dict(self) -> dict:
        return asdict(self)
