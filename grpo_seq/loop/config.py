"""LoopConfig: every knob of the trainer, with its help text, validated on construction
(:mod:`grpo_seq.loop.config_checks`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

from ..math.objective import LOSS_TYPES
from .config_checks import ADVANTAGE_TYPES, ConfigChecks, token_minibatch_conflict

__all__ = ["LoopConfig", "LOSS_TYPES", "ADVANTAGE_TYPES", "token_minibatch_conflict"]


@dataclass
class LoopConfig(ConfigChecks):
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
        metadata={"help": "Learning-rate schedule: constant, or linear decay to 0 over the run's progress "
                          "(its steps, or its minutes where a time limit ends it first)."},
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
    target_kl: float = field(
        default=0.0,
        metadata={"help": "PPO's target_kl, as Stable-Baselines3 applies it: a step's passes stop at the first minibatch "
                  "whose approximate KL from the sampling policy, the token mean of (r - 1) - log r, exceeds 1.5 x "
                  "target_kl, and that minibatch's gradient is dropped. 0: every pass runs."},
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

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def reuses_batch(self) -> bool:
        """Whether the policy moves before a step's last minibatch (pi_old is then not pi_theta)."""
        return self.mu * self.num_minibatches > 1 or self.minibatch_tokens > 0
