"""LoopConfig: every knob of the trainer, with its help text, validated on construction."""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar, NoReturn

from ..errors import ConfigError
from ..math.objective import IS_LEVELS, KL_ESTIMATORS, LOSS_TYPES, REDUCTIONS

__all__ = ["LoopConfig", "ADVANTAGE_TYPES", "token_minibatch_conflict"]

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


@dataclass
class LoopConfig:
    """Hyper-parameters of :class:`grpo_seq.GRPOLoop`.

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
    minibatch_tokens: int = field(
        default=0,
        metadata={
            "help": "Tokens (env steps) per optimizer step, drawn at random from every output of the batch, as "
            "PPO's batch_size draws env steps: a pass makes round(tokens / this) of them. Every output still runs "
            "forward in each, the loss mask picking its tokens: cheap for an env policy's MLP, that many forward "
            "passes for a language model. Token-mean losses only (bnpo, dapo, cispo, vespo), token-level ratios. "
            "0: minibatches are whole outputs (num_minibatches)."
        },
    )
    micro_batch_size: int = field(
        default=0,
        metadata={
            "help": "Outputs per forward/backward pass; gradients accumulate over a minibatch's micro-batches "
            "(exactly: the loss is normalised by the whole minibatch's counts). 0: the whole minibatch at once. "
            "With minibatch_tokens and an MLP policy each env step is an output (scored on its own)."
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
    skip_steps_without_signal: bool = field(
        default=False,
        metadata={"help": "Take no optimizer step from a batch whose advantages are all 0 (every group's rewards "
                  "equal, on every process): nothing in it says which outputs to prefer, yet the KL term (beta > 0), "
                  "an entropy bonus and Adam's momentum would still move the weights. The learning-rate schedule "
                  "still advances; the step logs perf/optimizer_steps 0."},
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
        metadata={"help": "Entropy bonus: the objective adds ent_coef * the policy's entropy at each scored token "
                  "(Stable-Baselines3's ent_coef, TRL's entropy_coef), averaged as ent_mean says. It keeps a policy "
                  "from turning deterministic before its group comparisons have told its actions apart. Needs a "
                  "policy whose entropy carries a gradient (the MLP and language-model policies); 0 turns it off."},
    )
    ent_mean: str = field(
        default="loss",
        metadata={"help": "How the entropy bonus is averaged: loss (inside the objective, as loss_type averages it: "
                  "Stable-Baselines3) or token (the token mean over each micro-batch, whatever loss_type, logged "
                  "apart as policy/entropy_bonus: TRL's entropy_coef; needed by use_adaptive_entropy)."},
    )
    ref_sync_steps: int = field(
        default=0,
        metadata={"help": "Move the reference toward the current policy every this many steps (0: never): "
                  "pi_ref <- alpha pi_theta + (1 - alpha) pi_ref with alpha = ref_sync_alpha (1: a reset, "
                  "iterative RL; < 1: TR-DPO, TRL's sync_ref_model). Needs beta > 0."},
    )
    ref_sync_alpha: float = field(
        default=1.0, metadata={"help": "ref_sync_steps: the mix alpha in (0, 1]; 1 replaces the reference."}
    )
    loss_type: str = field(
        default="grpo",
        metadata={
            "help": "Loss aggregation: grpo (mean over each output's tokens, then over outputs: the paper), "
            "bnpo (token mean over the minibatch), dr_grpo (token sum / (outputs * max length)), dapo (token mean "
            "over the whole step's tokens, all processes), luspo (token sum per output, mean over outputs). Other "
            "objectives: cispo (sg(min(r, epsilon_high)) A log pi, dapo's mean), sapo (soft gate "
            "4/tau sigmoid(tau (r-1)) A, grpo's mean), vespo (Gamma-weighted A log pi, dapo's mean)."
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
    scale_rewards: str = field(
        default="group",
        metadata={"help": "Divide the centred rewards by a std: group (each group's rewards; step-wise: at each "
                  "step), batch (the whole batch's on this process: PPO Lite; step-wise: of every centred "
                  "return-to-go) or none (Dr. GRPO: centring only). Centring stays per group. true and false "
                  "read as group and none."},
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
    step_advantage_w: float = field(
        default=0.0,
        metadata={"help": "GiGPO (verl-agent's name): add this many times a step-level advantage at anchor states "
                  "to the group's: the steps of a group that saw exactly the same observation are compared by "
                  "return-to-go (centred; divided by their std with scale_rewards), a baseline at that state "
                  "without a critic. Env rollouts (each step's observation) and text environments (the "
                  "observation each turn answers); continuous states repeat only at the start state a group "
                  "shares (0: off)."},
    )
    # -- the GRPO family: TRL 1.16's option names (verl's for the KL choices and dynamic sampling) --
    importance_sampling_level: str = field(
        default="token",
        metadata={"help": "token: one ratio pi_theta/pi_old per token (the paper). sequence: GSPO's one ratio per "
                  "output, exp of its mean token log ratio, clipped as a whole (use a tiny epsilon, e.g. 3e-4/4e-4)."},
    )
    delta: float | None = field(
        default=None,
        metadata={"help": "Two-sided clipping (INTELLECT-2): the unclipped ratio is capped at delta too, so a "
                  "negative advantage is never multiplied by an unbounded ratio; > 1 + epsilon_high (None: off)."},
    )
    sapo_temperature_pos: float = field(
        default=1.0, metadata={"help": "loss_type=sapo: gate temperature tau where A > 0 (f(r) = 4/tau sigmoid(tau (r-1)))."}
    )
    sapo_temperature_neg: float = field(
        default=1.05, metadata={"help": "loss_type=sapo: gate temperature tau where A <= 0."}
    )
    vespo_k_pos: float = field(
        default=2.0, metadata={"help": "loss_type=vespo: power k of the Gamma weight phi(w) = e^lambda w^k e^(-lambda w) where A >= 0."}
    )
    vespo_lambda_pos: float = field(default=3.0, metadata={"help": "loss_type=vespo: decay lambda where A >= 0."})
    vespo_k_neg: float = field(default=3.0, metadata={"help": "loss_type=vespo: power k where A < 0."})
    vespo_lambda_neg: float = field(default=2.0, metadata={"help": "loss_type=vespo: decay lambda where A < 0."})
    multi_objective_aggregation: str = field(
        default="sum_then_normalize",
        metadata={"help": "Several reward functions: sum_then_normalize (weighted sum, then the group advantage) or "
                  "normalize_then_sum (GDPO: each function's rewards normalised within the group, weighted sum, then "
                  "normalised over the batch)."},
    )
    mask_truncated_completions: bool = field(
        default=False,
        metadata={"help": "Leave outputs cut off at the length limit out of the loss (DAPO); their group's advantages "
                  "still count them. Needs a sampler that marks them (text)."},
    )
    top_entropy_quantile: float = field(
        default=1.0,
        metadata={"help": "Train on the top-rho of tokens by the policy's entropy only (Beyond the 80/20 rule: 0.2), "
                  "the quantile taken over each forward pass's tokens; 1 keeps all."},
    )
    use_adaptive_entropy: bool = field(
        default=False,
        metadata={"help": "Skywork-OR1's adaptive entropy: after each optimizer step ent_coef moves up by "
                  "ent_coef_delta while the entropy is at or below entropy_target, else down, within "
                  "[ent_coef_min, ent_coef_max]. Needs ent_mean=token."},
    )
    ent_coef_min: float = field(default=0.0, metadata={"help": "Adaptive entropy: lowest coefficient."})
    ent_coef_max: float = field(default=1.0, metadata={"help": "Adaptive entropy: highest coefficient."})
    ent_coef_delta: float = field(default=0.005, metadata={"help": "Adaptive entropy: step of the coefficient."})
    entropy_target: float = field(default=0.2, metadata={"help": "Adaptive entropy: target token-mean entropy (nats)."})
    off_policy_mask_threshold: float | None = field(
        default=None,
        metadata={"help": "DeepSeek-V3.2's off-policy sequence mask: drop an output with A < 0 whose mean "
                  "log(pi_sampler / pi_theta) over its tokens exceeds this (e.g. 0.5; None: off)."},
    )
    use_bias_correction_kl: bool = field(
        default=False,
        metadata={"help": "Multiply each token's KL by its ratio pi_theta/pi_old (DeepSeek-V3.2): the k3 gradient "
                  "becomes the reverse KL's off-policy too. TRL's default is True; ours keeps the paper's term."},
    )
    kl_estimator: str = field(
        default="k3",
        metadata={"help": "KL estimator (verl's kl_loss_type), l = log(pi/pi_ref): k1 = l (unbiased value, zero "
                  "expected gradient), k2 = l^2/2 (its gradient is the reverse KL's), k3 = e^-l + l - 1 (unbiased "
                  "value, >= 0; the paper's)."},
    )
    kl_in_reward: bool = field(
        default=False,
        metadata={"help": "verl's use_kl_in_reward: subtract beta * KL (summed over an output's tokens, or per step "
                  "for per-step advantages) from the rewards before the advantages, and drop the KL term of the loss."},
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={"help": "DAPO's dynamic sampling (verl's filter_groups): drop the groups whose rewards are all "
                  "equal and draw more until the step's num_groups are filled or max_resample_rounds run out; then "
                  "train on the groups kept. Each process fills its own share."},
    )
    max_resample_rounds: int = field(
        default=3, metadata={"help": "dynamic_sampling: most extra draws per step after the first (0: filter only)."}
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
    # config is refused by GRPOLoop.resume. A recipe's config adds its own (budgets, evaluation).
    RESUME_MAY_CHANGE: ClassVar[frozenset[str]] = frozenset({
        "output_dir", "resume_from", "overwrite", "report_to", "save_steps", "save_total_limit", "micro_batch_size",
        "max_nonfinite_steps", "save_optimizer", "divergence_factor",
    })

    def __post_init__(self) -> None:
        if str(self.scale_rewards).lower() in ("true", "false"):  # TRL's and older spec files' spelling
            self.scale_rewards = "group" if str(self.scale_rewards).lower() == "true" else "none"
        self._check_finite()
        self._check_batch_and_optimizer()
        self._check_update()
        self._check_objective()
        self._check_token_minibatches()
        self._check_family()
        self._check_run()
        self._warn_mismatched()

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

    def to_dict(self) -> dict:
        return asdict(self)
