"""Train a discrete-action gymnasium agent with GRPO: an episode's actions are the "completion",
and the G episodes of a group share their start state.

    grpo-seq train-env --env_id Acrobot-v1            # installed command
    python recipes/gym_env.py --env_id Acrobot-v1     # the same program, from a checkout
    python recipes/cartpole.py                        # CartPole-v1, its tuned defaults
    accelerate launch --multi_gpu --num_processes 2 recipes/gym_env.py --env_id LunarLander-v3

Defaults per env family (:data:`ENV_DEFAULTS`; every one can be given on the command line),
chosen on the evidence in docs/experiments.md ("Beyond CartPole"):

- CartPole: one group of G = 2 episodes per update, Adam at 2e-2, observations in units of the
  termination thresholds. Many small updates learn in the fewest env steps there, since two
  episodes of CartPole nearly always differ in length.
- Every other env: one group of G = 4 per update, Adam at 5e-3, gamma 0.99 (MountainCar: 2
  groups of G = 8, advantages centred but not divided by the group's std, Adam at 1e-2 with beta2
  0.999, observations centred on the box random play reaches and an entropy bonus of 0.01, so
  that the first push from a standstill, whose best direction depends on the start position, is
  learned; LunarLander: G = 2 over 2M env steps), observations in the units
  random play reaches (:func:`grpo_seq.policies.obs_scale.rollout_obs_scale`), and a
  small count-based exploration bonus (:class:`grpo_seq.sampling.novelty.NoveltyBonus`) that
  breaks ties: where every episode of a group times out alike (Acrobot, MountainCar before the
  first success) GRPO has nothing to compare, and the bonus tells the members apart by the rarer
  states they reached. Advantages are divided by the group's std, so the tie-breaker's size does
  not matter where it is the only difference, and it is too small to matter where the env's
  rewards differ. A member whose episode has ended stays in its group's step-wise comparison with
  return-to-go 0 (``absorb_ended``): a LunarLander lander that hovers or jitters on the ground
  after its partner has landed is compared with stopping, where otherwise its remaining steps
  would never be trained. The solved threshold is the env spec's ``reward_threshold``.

Where this departs from the paper (DeepSeekMath section 4.1), and why:
- beta = 0, so no reference model: the reference would be the random initial policy.
- Per-step advantages: each step's return-to-go is normalised against the group members still
  running at the same step. The paper's process supervision normalises step rewards over the
  whole group and is identically 0 where every step pays the same.
- The loss is a token mean (``bnpo``): a long episode weighs by its steps, not as one output.
- Adam with momentum 0.5 (beta2 0.95): consecutive batches start from different states and
  disagree; momentum 0.9 keeps pushing one batch's direction for ~10 updates.
Writes <output_dir>/{config.json, metrics.jsonl, summary.json, policy/, policy_best/, checkpoints/}. SIGTERM or
Ctrl-C finishes the current step, writes a checkpoint and prints the command that resumes it
(`--resume_from <output_dir>`); the resumed run repeats the uninterrupted one exactly.
"""

from __future__ import annotations

import json
import math
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, GRPOConfig, GRPOTrainer
from grpo_seq.cli import cli_errors, parse_config, require, run_folder
from grpo_seq.errors import ConfigError
from grpo_seq.evaluation import PolicyEvaluator, eval_stream_seed
from grpo_seq.plot import plot_run_if_possible
from grpo_seq.record import check_renderer, record_episode
from grpo_seq.policies.obs_scale import default_obs_scale, rollout_obs_units
from grpo_seq.sampling.env import check_spaces, env_spec, make_env
from grpo_seq.sampling.novelty import NoveltyBonus
from grpo_seq.stopping import GracefulStop, checkpoint_on_error
from grpo_seq.tracking import tracker_kwargs


# The defaults of the options left unset (None): CartPole's, chosen on 80-seed sweeps, and one set
# for every other env, with per-env budgets and the changes their sweeps supported
# (docs/experiments.md, "Beyond CartPole").
ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    "cartpole": dict(num_generations=2, num_groups=1, learning_rate=2e-2, gamma=0.98, advantage="stepwise",
                     scale_rewards=True, absorb_ended=False, adam_beta2=0.95, exploration_bonus=0.0,
                     obs_center=False, ent_coef=0.0, total_env_steps=50_000, eval_every=5_000),
    "default": dict(num_generations=4, num_groups=1, learning_rate=5e-3, gamma=0.99, advantage="stepwise",
                    scale_rewards=True, absorb_ended=True, adam_beta2=0.95, exploration_bonus=0.01,
                    obs_center=False, ent_coef=0.0, total_env_steps=500_000, eval_every=10_000),
}
ENV_FAMILY = {"CartPole-v0": "cartpole", "CartPole-v1": "cartpole"}
ENV_OVERRIDES: dict[str, dict[str, Any]] = {
    "Acrobot-v1": dict(total_env_steps=200_000, eval_every=5_000),
    # once the car reaches the flag, members differ by a few steps of chance, which std-scaled
    # advantages and Adam's short memory turned into full-size steps that undid a reaching policy;
    # centred advantages and beta2 0.999 keep those steps small. What is left to learn then is the
    # first push from a standstill, whose best direction depends on the start position: centred
    # observations spread the start positions across the inputs, step-wise advantages credit that
    # push at the one step all members share, and an entropy bonus is meant to keep the group
    # trying both directions (a run can still settle on pushing right first from every start:
    # question mountaincar_first_push of the experiments record). PPO's budget there is 1M env
    # steps too
    "MountainCar-v0": dict(num_generations=8, num_groups=2, advantage="stepwise", learning_rate=1e-2,
                           scale_rewards=False, adam_beta2=0.999, obs_center=True, ent_coef=0.01,
                           total_env_steps=1_000_000, eval_every=10_000),
    # a pair per update, as CartPole: the shaped reward tells two episodes apart. Solve times have a
    # long tail, and slow seeds were still improving when a 1M budget's learning rate reached 0; a
    # 2M budget lets them finish (question lunarlander_defaults of the experiments record)
    "LunarLander-v3": dict(num_generations=2, total_env_steps=2_000_000, eval_every=20_000),
}


def per_env(env_id: str) -> dict[str, Any]:
    """The defaults of ``env_id``'s family with the env's own overrides."""
    return {**ENV_DEFAULTS[ENV_FAMILY.get(env_id, "default")], **ENV_OVERRIDES.get(env_id, {})}


PER_ENV = "default: per env family (grpo_seq.train_env.ENV_DEFAULTS)"


@dataclass
class EnvTrainConfig(GRPOConfig):
    env_id: str = field(
        default="CartPole-v1",
        metadata={"help": "Any gymnasium env with Discrete actions and a flat Box observation."},
    )
    total_env_steps: int | None = field(
        default=None,
        metadata={"help": f"Training budget in env steps (all processes); the learning rate decays to 0 over it. {PER_ENV}."},
    )
    eval_every: int | None = field(
        default=None, metadata={"help": f"Evaluate after every this many training env steps. {PER_ENV}."}
    )
    eval_episodes: int = field(default=10, metadata={"help": "Greedy episodes per evaluation."})
    solved_return: float | None = field(
        default=None, metadata={"help": "Eval mean return that counts as solved (default: the env spec's reward_threshold)."}
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
    exploration_bonus: float | None = field(
        default=None,
        metadata={"help": "Scale of a count-based bonus, scale / sqrt(visits), added to each step's training reward "
                  "(NoveltyBonus): it breaks ties where every episode of a group ends alike; 0 turns it off. "
                  f"Evaluation reports the env's own return. {PER_ENV}."},
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
    scale_rewards: bool | None = field(
        default=None,
        metadata={"help": "Divide advantages by the group's std (false: centre only, as Dr. GRPO). Unscaled, a "
                  "group whose members differ by a step or two of chance moves the policy by that little, "
                  f"not by a unit-sized advantage. {PER_ENV}.",
                  # argparse: a bare --scale_rewards means true, as for the other bool options
                  "nargs": "?", "const": True},
    )
    absorb_ended: bool | None = field(
        default=None,
        metadata={"help": "advantage=stepwise: a member whose episode has ended stays in its group's comparison at "
                  "later steps with return-to-go 0, so a member that runs on (hovering, jittering on the ground) "
                  "is compared with stopping; otherwise steps past the second-longest member's end get advantage 0 "
                  f"and are never trained. {PER_ENV}.",
                  "nargs": "?", "const": True},
    )
    ent_coef: float | None = field(
        default=None,
        metadata={"help": "Entropy bonus: the objective adds ent_coef * the policy's entropy at each step "
                  "(Stable-Baselines3's ent_coef). It keeps a policy from settling on one action where its group "
                  f"never tries another, as MountainCar's first push from a standstill; 0 turns it off. {PER_ENV}."},
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient; 0 builds no reference policy."})
    loss_type: str = field(
        default="bnpo",
        metadata={"help": "Loss aggregation: bnpo (token mean; default here: a long episode counts by its steps, "
                  "not as one output), grpo (the paper) or dr_grpo."},
    )

    # Budgets, evaluation and how the run is computed may change on --resume_from; the policy's
    # shape and the algorithm may not (GRPOTrainer.resume refuses those, naming each).
    RESUME_MAY_CHANGE: ClassVar[frozenset[str]] = GRPOConfig.RESUME_MAY_CHANGE | {
        "total_env_steps", "eval_every", "eval_episodes", "solved_return", "stop_after_solved", "record", "keep_best",
        "torch_threads", "use_cpu",
    }

    def __post_init__(self) -> None:
        self._fill_per_env_defaults()
        super().__post_init__()
        for name in ("total_env_steps", "eval_every", "eval_episodes", "torch_threads", "bonus_bins"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "stop_after_solved", self.stop_after_solved >= 0, "must be >= 0 (0: never stop early)")
        require(self, "exploration_bonus", self.exploration_bonus >= 0, "must be >= 0 (0: none)")
        require(self, "hidden_sizes", all(w >= 1 for w in self.hidden_sizes), "every width must be >= 1")
        require(self, "obs_scale", all(math.isfinite(x) and x > 0 for x in self.obs_scale),
                "every divisor must be a finite number > 0")

    def _fill_per_env_defaults(self) -> None:
        """Options left None take their env family's defaults (the solved threshold is filled in
        by :func:`train`, once the env is known to exist and fit)."""
        for name, value in per_env(self.env_id).items():
            if getattr(self, name) is None:
                setattr(self, name, value)


def solved_threshold(args: EnvTrainConfig) -> float:
    """``--solved_return``, else the env spec's ``reward_threshold``."""
    if args.solved_return is not None:
        return args.solved_return
    threshold = env_spec(args.env_id).reward_threshold
    if threshold is None:
        raise ConfigError(f"--solved_return: {args.env_id} has no reward_threshold in its spec; give one")
    return float(threshold)


def make_policy(args: EnvTrainConfig) -> CategoricalMLPPolicy:
    """The MLP policy; ``args.obs_scale`` empty means CartPole's thresholds or, for another env,
    what random play seeded with ``args.seed`` reaches (:func:`rollout_obs_units`: centred on it
    with ``args.obs_center``)."""
    env = make_env(args.env_id)
    try:
        check_spaces(args.env_id, env.observation_space, env.action_space)
        obs_dim, num_actions = env.observation_space.shape[0], int(env.action_space.n)
        shift, scale = None, args.obs_scale or (None if args.obs_center else default_obs_scale(env))
        if args.obs_center or not scale:
            shift, rolled = rollout_obs_units(env, args.obs_center, seed=args.seed)
            scale = scale or rolled
    finally:
        env.close()
    if len(scale) != obs_dim:
        raise ConfigError(f"--obs_scale has {len(scale)} numbers; {args.env_id} observations have {obs_dim} "
                          "dimensions (give one divisor per dimension)")
    return CategoricalMLPPolicy(obs_dim, num_actions, tuple(args.hidden_sizes), obs_scale=scale,
                                orthogonal_init=args.orthogonal_init, obs_shift=shift)


def make_sampler(args: EnvTrainConfig, process_index: int, obs_scale: list[float]) -> EnvGroupSampler:
    """Each process samples its own whole groups, seeded apart; with ``--exploration_bonus`` the
    processes count visits separately."""
    bonus = NoveltyBonus(args.exploration_bonus, obs_scale, args.bonus_bins) if args.exploration_bonus > 0 else None
    return EnvGroupSampler(args.env_id, args.num_groups, args.num_generations,
                           seed=args.seed + 1_000_003 * process_index, bonus=bonus)


def main(argv: list[str] | None = None) -> None:
    """Train, evaluate and save one run from the command line's options (``argv``, default
    ``sys.argv[1:]``); bad usage ends as one ``error: ...`` line (:func:`grpo_seq.cli.cli_errors`).

    Changes the whole process, as a script's entry point may: seeds the global python, numpy and
    torch RNGs (``accelerate.utils.set_seed``) and sets torch's thread count.
    """
    with cli_errors():
        train(parse_config(EnvTrainConfig, argv))


def train(args: EnvTrainConfig) -> None:
    """The run itself (see :func:`main`)."""
    # a resumed run goes on in its own folder
    args.output_dir = run_folder(args, f"runs/{args.env_id}__{args.seed}__{int(time.time())}")
    torch.set_num_threads(args.torch_threads)
    set_seed(args.seed)  # python, numpy and torch: the policy's initial weights depend on --seed
    accelerator = Accelerator(cpu=args.use_cpu, **tracker_kwargs(args.report_to, args.output_dir))
    main_proc = accelerator.is_main_process
    if args.record and main_proc:  # fail now, not after training, when the renderer is missing
        check_renderer(args.env_id)

    # The policy first (its observation scale sizes the bonus's cells); parameters start equal everywhere.
    policy = make_policy(args)
    args.solved_return = solved_threshold(args)
    sampler = make_sampler(args, accelerator.process_index, policy.init_kwargs["obs_scale"])
    trainer = GRPOTrainer(args, policy, sampler, accelerator)
    # Same eval seeds on every process: equal parameters give equal returns, so all agree.
    evaluate = PolicyEvaluator(args.env_id, args.eval_episodes, seed=eval_stream_seed(args.seed))

    # Everything the loop carries besides the trainer, so a resumed run repeats an uninterrupted one.
    state = trainer.resume(args.resume_from) if args.resume_from else {}
    eval_seconds = state.get("eval_seconds", 0.0)
    solved_at: dict | None = state.get("solved_at")
    last_eval = state.get("last_eval")
    evals_after_solved = state.get("evals_after_solved", 0)
    best: dict | None = state.get("best")  # the best evaluation so far: return, env steps
    next_eval = state.get("next_eval", args.eval_every)
    evaluate.seed = state.get("eval_seed", evaluate.seed)
    start = time.perf_counter() - state.get("elapsed", 0.0)

    def loop_state() -> dict:
        return {"eval_seconds": eval_seconds, "solved_at": solved_at, "last_eval": last_eval, "next_eval": next_eval,
                "eval_seed": evaluate.seed, "elapsed": time.perf_counter() - start,
                "evals_after_solved": evals_after_solved, "best": best}

    def done() -> bool:
        return trainer.env_steps >= args.total_env_steps or bool(
            args.stop_after_solved and solved_at and evals_after_solved >= args.stop_after_solved)

    bar = tqdm(total=args.total_env_steps, initial=min(trainer.env_steps, args.total_env_steps), unit="step",
               disable=not main_proc, desc=args.env_id)
    warned = False  # the no-learning-signal warning is printed once
    # the bar closes on an error too, so the error line starts a line of its own
    with bar, GracefulStop() as stop, checkpoint_on_error(trainer, loop_state, args.output_dir):
        while not done():
            m = trainer.step(progress=trainer.env_steps / args.total_env_steps)
            if main_proc and trainer.signal.message and not warned:
                bar.write(f"warning: {trainer.signal.message}")
                warned = True
            bar.update(min(trainer.env_steps, args.total_env_steps) - bar.n)
            if trainer.env_steps >= next_eval or trainer.env_steps >= args.total_env_steps:
                next_eval = (trainer.env_steps // args.eval_every + 1) * args.eval_every
                t_eval = time.perf_counter()
                last_eval = float(evaluate(trainer.policy).mean())
                eval_seconds += time.perf_counter() - t_eval
                elapsed = time.perf_counter() - start
                trainer.log({"step": trainer.step_count, "perf/tokens_total": trainer.env_steps, "eval/return": last_eval,
                             "eval/seed": evaluate.last_seed, "perf/wall_seconds": elapsed})
                if best is None or last_eval > best["return"]:
                    best = {"return": last_eval, "env_steps": trainer.env_steps}
                    if args.keep_best:
                        trainer.save(Path(args.output_dir, "policy_best"))
                if solved_at is not None:
                    evals_after_solved += 1
                elif last_eval >= args.solved_return:
                    solved_at = {"env_steps": trainer.env_steps, "seconds": elapsed,
                                 "train_seconds": elapsed - eval_seconds, "iteration": trainer.step_count}
                if main_proc:
                    bar.write(f"env steps {trainer.env_steps}: eval return {last_eval:.1f}")
            bar.set_postfix(ret=f"{m['reward/env_return']:.0f}", eval=f"{last_eval if last_eval is not None else 0:.0f}",
                            **({"signal": "NONE"} if m["reward/flat_steps_in_a_row"] >= trainer.signal.patience else {}))
            trainer.maybe_save_checkpoint(loop_state)
            if stop.agreed(accelerator):
                bar.close()
                stop.checkpoint_and_exit(trainer, loop_state, args.output_dir)
    bar.close()
    seconds = time.perf_counter() - start

    trainer.save_checkpoint(loop_state)
    trainer.save()
    video = None
    if args.record and main_proc:
        video = record_episode(trainer.policy, args.env_id, Path(args.output_dir, "agent.gif"), seed=eval_stream_seed(args.seed))
        print(f"greedy episode: {video['frames']} steps, return {video['return']:.0f}: {video['gif']}"
              + (f" and {video['mp4']}" if video["mp4"] else ""))
    summary = {
        "env_id": args.env_id,
        "seed": args.seed,
        "solved": solved_at is not None,
        "solved_env_steps": solved_at["env_steps"] if solved_at else None,
        "solved_seconds": solved_at["seconds"] if solved_at else None,
        "solved_train_seconds": solved_at["train_seconds"] if solved_at else None,
        "final_eval_return": last_eval,
        "best_eval_return": best["return"] if best else None,
        "best_eval_env_steps": best["env_steps"] if best else None,
        "best_policy": str(Path(args.output_dir, "policy_best")) if best and args.keep_best else None,
        "no_signal": trainer.signal.message,  # the no-learning-signal warning, if the run ever gave it
        "env_steps": trainer.env_steps,
        "iterations": trainer.step_count,
        "seconds": seconds,
        "eval_seconds": eval_seconds,
        "num_processes": accelerator.num_processes,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,  # this process's peak
        "record": video,
    }
    if main_proc:
        Path(args.output_dir, "summary.json").write_text(json.dumps(summary, indent=2))
        print(json.dumps(summary))
        curves = plot_run_if_possible(args.output_dir, Path(args.output_dir, "curves.png"), x="env_steps")
        if curves:
            print(f"learning curves: {curves}")
    trainer.close()


if __name__ == "__main__":
    main()
