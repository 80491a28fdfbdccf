"""The spec of an env agent's training run (:class:`EnvJob`); :mod:`grpo_seq.jobs.env` runs it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from ..loop.config import LoopConfig, token_minibatch_conflict
from ..envs.defaults import PER_ENV, per_env
from ..errors import require
from .spec import JobSpec, check_threads

__all__ = ["EnvJob"]


@dataclass
class EnvJob(JobSpec, LoopConfig):
    """An env agent's training run: :class:`LoopConfig` with the env, budget, evaluation and
    policy options. Options left None take their env family's defaults
    (:func:`grpo_seq.envs.defaults.per_env`) when the spec is built."""

    KIND: ClassVar[str] = "env"
    FIRST_OPTIONS: ClassVar[tuple[str, ...]] = ("env_id", "total_env_steps", "eval_every", "seed", "output_dir",
                                                "resume_from", "record")

    env_id: str = field(
        default="CartPole-v1",
        metadata={"help": "Any gymnasium env with Discrete, MultiDiscrete, MultiBinary or Box actions (a multi-dimensional "
                  "action: one categorical per dimension, as Stable-Baselines3's PPO; a Box one cut into action_bins "
                  "values per dimension) and Box, Discrete, MultiDiscrete, MultiBinary or Dict observations "
                  "(flattened; discrete ones one-hot; images through a convolutional torso). An env of your own: "
                  "module:Id-v0 imports module, whose import registers Id-v0."},
    )
    total_env_steps: int | None = field(
        default=None,
        metadata={"help": f"Training budget in env steps (all processes); the learning rate decays to 0 over it. {PER_ENV}."},
    )
    eval_every: int | None = field(
        default=None,
        metadata={"help": f"Evaluate after every this many training env steps (0: never). {PER_ENV}."},
    )
    max_episode_steps: int | None = field(
        default=None, metadata={"help": "End episodes after this many steps (default: the env's own time limit)."}
    )
    eval_episodes: int = field(default=10, metadata={"help": "Episodes per evaluation."})
    eval_greedy: bool | None = field(
        default=None, metadata={"help": "Evaluate with the likeliest action at each step (false: actions sampled from "
                                "the policy, seeded by the evaluation's seed, as rl-zoo3 evaluates MiniGrid and Atari). "
                                f"{PER_ENV}.", "nargs": "?", "const": True})
    solved_return: float | None = field(
        default=None, metadata={"help": "Eval mean return that counts as solved (default: the env spec's reward_threshold; "
                                 "an env without one is never solved and trains its whole budget)."}
    )
    stop_after_solved: int = field(
        default=0, metadata={"help": "Stop this many evaluations after the first one that solves (0: use the whole budget)."}
    )
    keep_best: bool = field(
        default=True,
        metadata={"help": "Also save the policy of the best evaluation so far to <output_dir>/policy_best/ (as "
                  "Stable-Baselines3's EvalCallback does with best_model_save_path): a policy that drifts after "
                  "solving still leaves its best behind. The summary names its return and env steps."},
    )
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64], metadata={"help": "MLP hidden widths."})
    env_wrappers: list[str] | None = field(
        default=None,
        metadata={"help": "Wrappers put around the env, innermost first, by import path (module:Class or module.Class, "
                  "rl-zoo3's env_wrapper), in training, evaluation and acting: minigrid.wrappers:FlatObsWrapper "
                  "flattens a MiniGrid observation and its mission. default: per env family (grpo_seq.envs.defaults), else "
                  "none."},
    )
    action_bins: int | None = field(
        default=None,
        metadata={"help": "A continuous (Box) action: the evenly spaced values each dimension takes, from its low "
                  "to its high bound; the policy picks one per dimension (one categorical each). Discrete actions "
                  "ignore it. default: per env family (grpo_seq.envs.defaults), else "
                  "grpo_seq.sampling.spaces.ACTION_BINS."},
    )
    action_clip: list[float] | None = field(
        default=None,
        metadata={"help": "A continuous action with infinite bounds: the low and high that replace them (two "
                  "numbers). An unbounded action space is refused without it."},
    )
    action_head: str | None = field(
        default=None,
        metadata={"help": "A continuous (Box) action's head over its action_bins values per dimension: categorical "
                  "(one free logit per value) or gaussian (the values weighed by a Gaussian per dimension, its mean "
                  "from the network and a learned log std, as Stable-Baselines3's PPO; grpo_seq.policies.mlp). "
                  f"{PER_ENV}."},
    )
    log_std_init: float | None = field(
        default=None, metadata={"help": "action_head gaussian: the log std each dimension starts at, in units where "
                                "the dimension's range is [-1, 1] (Stable-Baselines3's log_std_init). "
                                f"{PER_ENV}."}
    )
    obs_scale: list[float] = field(
        default_factory=list,
        metadata={"help": "Divide each observation dimension by this before the MLP (one number per dimension). "
                  "Default: CartPole's termination thresholds for the cart position and pole angle; for other envs "
                  "the largest |value| random play reaches in 2,000 steps (rollout_obs_scale)."},
    )
    obs_center: bool | None = field(
        default=None,
        metadata={"help": "Without --obs_scale given: map the box random play reaches in 2,000 steps onto [-1, 1] "
                  "(subtract its midpoint, divide by its half-width: rollout_obs_center) instead of dividing by "
                  "its largest |value|. For observations that sit far off 0, such as MountainCar's position. "
                  f"{PER_ENV}.", "nargs": "?", "const": True},
    )
    obs_norm: bool | None = field(
        default=None,
        metadata={"help": "Move the observation units after every update to the running mean and standard deviation of "
                  "every observation trained on so far (Stable-Baselines3's VecNormalize, without its clipping), "
                  "instead of keeping random play's: for observations whose range grows as the policy learns, "
                  f"such as a running robot's velocities. Saved with the policy. {PER_ENV}.",
                  "nargs": "?", "const": True},
    )
    exploration_bonus: float | None = field(
        default=None,
        metadata={"help": "Scale of a count-based bonus, scale / sqrt(visits), added to each step's training reward "
                  "(NoveltyBonus): it breaks ties where every episode of a group ends alike; 0 turns it off. Visits are "
                  "counted per cell of the policy's observation units, or per distinct frame of an image. "
                  f"Evaluation reports the env's own return. {PER_ENV}."},
    )
    branch_prob: float = field(
        default=0.0,
        metadata={"help": "Each group starts, with this probability, from a state the previous rollout visited (a copy "
                  "of the env at a step drawn uniformly from all its steps) instead of a reset: its members differ "
                  "only from that state on, so the advantage of each action near it is a comparison at one state "
                  "(per-step credit, without a critic). Needs an env that copy.deepcopy can copy; 0: every group "
                  "starts at reset."},
    )
    group_mode: str = field(
        default="episodes",
        metadata={"help": "episodes: a group is G episodes from one start state; alternatives: a group is G actions "
                  "tried at one state the policy's walk visits, each followed for --horizon env steps from a copy "
                  "of the env and scored by its discounted return (AlternativesSampler; Discrete actions, an env "
                  "copy.deepcopy can copy)."},
    )
    horizon: int = field(
        default=1, metadata={"help": "group_mode alternatives: env steps per alternative, its own action then "
                             "the policy's."}
    )
    every_action: bool = field(
        default=False,
        metadata={"help": "group_mode alternatives: try each action once at a state (G is then the number of "
                  "actions) instead of G draws from the policy."},
    )
    bonus_bins: int = field(
        default=20, metadata={"help": "NoveltyBonus cells per [-obs_scale, obs_scale] span of each dimension."}
    )
    orthogonal_init: bool = field(
        default=True,
        metadata={"help": "Orthogonal hidden layers with gain sqrt(2) and zero biases (Stable-Baselines3's PPO "
                  "init) instead of torch's uniform default."},
    )
    record: bool = field(
        default=False,
        metadata={"help": "After training, write a greedy episode of the policy to <output_dir>/agent.gif (an MP4 too "
                  "when ffmpeg is installed), the step drawn on each frame. CartPole's renderer needs pygame."},
    )
    torch_threads: int = field(default=1, metadata={"help": "torch threads; a tiny MLP is no faster on more."})
    use_cpu: bool = field(
        default=True,
        metadata={"help": "Train on CPU even where a GPU exists: a tiny MLP loses more to kernel launches than it "
                  "gains. Also what makes `accelerate launch --multi_gpu` start real processes on a CPU-only machine."},
    )
    num_generations: int | None = field(default=None, metadata={"help": f"G: episodes per shared start state. {PER_ENV}."})
    num_groups: int | None = field(
        default=None, metadata={"help": f"Start states per step on each process. {PER_ENV}."}
    )
    learning_rate: float | None = field(default=None, metadata={"help": f"Adam learning rate. {PER_ENV}."})
    mu: int | None = field(
        default=None, metadata={"help": "Passes over each sampled batch (the paper's mu; PPO's n_epochs); above 1, "
                                f"the sampling policy's log-probs are kept for the ratio. {PER_ENV}."}
    )
    advantage: str | None = field(
        default=None,
        metadata={"help": "stepwise (returns-to-go compared at equal step indices), outcome (group-normalised "
                  "episode return) or process (the paper's; blind where every step pays the same). "
                  f"{PER_ENV}."},
    )
    gamma: float | None = field(
        default=None, metadata={"help": f"Discount inside returns-to-go. {PER_ENV}."}
    )
    lr_schedule: str = field(
        default="linear", metadata={"help": "constant, or linear decay to 0 over --total_env_steps."}
    )
    adam_beta1: float = field(
        default=0.5, metadata={"help": "Adam momentum. 0.5, not 0.9: consecutive batches start from different states "
                               "and disagree, and momentum 0.9 keeps pushing one batch's direction for ~10 updates "
                               "(docs/experiments.md)."}
    )
    adam_beta2: float | None = field(
        default=None, metadata={"help": "Adam's decay rate of the squared gradient's running mean: 0.95 beside beta1 "
                                "0.5 (docs/experiments.md); MountainCar's 0.999 remembers the informative batches, so "
                                f"the step stays small while batches carry only noise. {PER_ENV}."}
    )
    scale_rewards: str | None = field(
        default=None,
        metadata={"help": "Divide the centred rewards by the group's std (group), the batch's (batch), or not at all "
                  "(none: Dr. GRPO; true and false read as group and none). Unscaled, a group whose members "
                  "differ by a step or two of chance moves the policy by that little, not by a unit-sized "
                  f"advantage. {PER_ENV}."},
    )
    absorb_ended: bool | None = field(
        default=None,
        metadata={"help": "advantage=stepwise: a member whose episode has ended stays in its group's comparison at "
                  "later steps with return-to-go 0, so a member that runs on (hovering, jittering on the ground) "
                  "is compared with stopping; otherwise steps past the second-longest member's end get advantage 0 "
                  f"and are never trained. {PER_ENV}.",
                  "nargs": "?", "const": True},
    )
    step_advantage_w: float | None = field(
        default=None,
        metadata={"help": "GiGPO's step-level advantage at anchor states, this many times (verl-agent's "
                  "step_advantage_w): steps of a group that saw exactly the same observation (a discrete or "
                  "one-hot state: FrozenLake, an identity task) are compared by return-to-go, a baseline at that "
                  "state. Continuous observations repeat only at the start state a group shares, so there it only "
                  f"weighs the first step's comparison twice; 0 turns it off. {PER_ENV}."},
    )
    ent_coef: float | None = field(
        default=None,
        metadata={"help": "Entropy bonus: the objective adds ent_coef * the policy's entropy at each step "
                  "(Stable-Baselines3's ent_coef). It keeps a policy from settling on one action where its group "
                  f"never tries another, as MountainCar's first push from a standstill; 0 turns it off. {PER_ENV}."},
    )
    minibatch_tokens: int | None = field(
        default=None,
        metadata={"help": "Env steps per optimizer step, drawn at random from every episode of the batch, as PPO's "
                  "batch_size (0: one step per pass, or --num_minibatches of whole episodes). Left unset, a loss over "
                  f"whole episodes (grpo, dr_grpo, GSPO's sequence ratio) takes 0. {PER_ENV}."},
    )
    target_kl: float | None = field(
        default=None,
        metadata={"help": "PPO's target_kl, as Stable-Baselines3 applies it: a step's passes stop at the first minibatch "
                  "whose approximate KL from the sampling policy, the token mean of (r - 1) - log r, exceeds 1.5 x "
                  f"target_kl, and that minibatch's gradient is dropped (0: every pass runs). {PER_ENV}."},
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient; 0 builds no reference policy."})
    loss_type: str = field(
        default="bnpo",
        metadata={"help": "Loss aggregation: bnpo (token mean; default here: a long episode counts by its steps, "
                  "not as one output), grpo (the paper) or dr_grpo."},
    )

    # Budgets, evaluation and how the run is computed may change on --resume_from; the policy's
    # shape and the algorithm may not (GRPOLoop.resume refuses those, naming each).
    RESUME_MAY_CHANGE: ClassVar[frozenset[str]] = LoopConfig.RESUME_MAY_CHANGE | {
        "total_env_steps", "eval_every", "eval_episodes", "eval_greedy", "solved_return", "stop_after_solved", "record", "keep_best",
        "torch_threads", "use_cpu",
    }

    def __post_init__(self) -> None:
        self._fill_per_env_defaults()
        super().__post_init__()
        for name in ("total_env_steps", "eval_episodes", "torch_threads", "bonus_bins"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "eval_every", self.eval_every >= 0, "must be >= 0 (0: never evaluate)")
        check_threads(self)
        if self.max_episode_steps is not None:
            require(self, "max_episode_steps", self.max_episode_steps >= 1, "must be >= 1")
        require(self, "stop_after_solved", self.stop_after_solved >= 0, "must be >= 0 (0: never stop early)")
        require(self, "exploration_bonus", self.exploration_bonus >= 0, "must be >= 0 (0: none)")
        require(self, "branch_prob", 0 <= self.branch_prob < 1, "must be in [0, 1) (0: every group starts at reset)")
        require(self, "group_mode", self.group_mode in ("episodes", "alternatives"), "must be episodes or alternatives")
        require(self, "horizon", self.horizon >= 1, "must be >= 1")
        require(self, "branch_prob", self.group_mode == "episodes" or not self.branch_prob,
                "must be 0 with group_mode alternatives (its groups start at visited states already)")
        require(self, "hidden_sizes", all(w >= 1 for w in self.hidden_sizes), "every width must be >= 1")
        require(self, "action_bins", self.action_bins is None or self.action_bins >= 2,
                "must be >= 2 (a dimension needs 2 values to choose between)")
        require(self, "action_head", self.action_head in ("categorical", "gaussian"), "must be categorical or gaussian")
        require(self, "log_std_init", math.isfinite(self.log_std_init), "must be a finite number")
        require(self, "action_clip", self.action_clip is None or (
            len(self.action_clip) == 2 and all(math.isfinite(x) for x in self.action_clip)
            and self.action_clip[0] < self.action_clip[1]), "must be two finite numbers, low < high")
        require(self, "obs_scale", all(math.isfinite(x) and x > 0 for x in self.obs_scale),
                "every divisor must be a finite number > 0")
        require(self, "obs_norm", not (self.obs_norm and self.obs_scale), "moves the units itself; leave --obs_scale out")
        require(self, "obs_norm", not (self.obs_norm and self.beta and self.ref_sync_steps),
                "moves the policy's units, and --ref_sync_steps would copy its weights into a reference of other "
                "units; set one of them off")

    def takes_step_minibatches(self) -> bool:
        """Whether minibatches of env steps fit this run: its loss is a mean of per-step terms and
        it asks for no minibatches of whole episodes."""
        return self.num_minibatches == 1 and token_minibatch_conflict(
            self.loss_type, self.importance_sampling_level, self.off_policy_mask_threshold) is None

    def _fill_per_env_defaults(self) -> None:
        """Options left None take their env family's defaults (the solved threshold is filled in
        by :func:`train`, once the env is known to exist and fit)."""
        defaults = per_env(self.env_id)
        unset = {name for name in defaults if getattr(self, name) is None}
        for name in unset:
            setattr(self, name, defaults[name])
        self.family_filled = frozenset(unset)  # not an option: which values the family gave (EnvRun: images)
        if "minibatch_tokens" in unset and not self.takes_step_minibatches():
            self.minibatch_tokens = 0  # the env's default yields to minibatches of whole episodes
        if "obs_norm" in unset and self.obs_scale:
            self.obs_norm = False  # the env's default yields to the units given
