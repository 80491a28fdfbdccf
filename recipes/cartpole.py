"""GRPO on CartPole-v1: an episode's actions are the "completion", G episodes share a start state.

    accelerate launch recipes/cartpole.py                      # or: python recipes/cartpole.py
    accelerate launch --multi_gpu --num_processes 2 recipes/cartpole.py   # 2 CPU processes
    python recipes/cartpole.py --help                          # every option

Where this departs from the paper (DeepSeekMath section 4.1), and why:
- beta = 0, so no reference model: the reference would be the random initial policy and
  would pull a balancing agent back towards falling.
- Per-step advantages by default: each step's return-to-go is normalised against the group
  members still running at the same step. The paper's process supervision normalises step
  rewards over the whole group and is identically 0 here (every step pays 1); outcome
  supervision (`--advantage outcome`) learns as fast on the median, with a wider spread
  across seeds (docs/experiments.md).
- One group of G = 2 episodes per update, and the loss averaged over tokens (`bnpo`), not
  over episodes. Adam moves about the same distance per update whatever the batch, so many
  small updates learn in fewer env steps than a few large ones (than G = 4, or several groups
  per update: docs/experiments.md); a token mean lets a 300-step episode weigh 300 times a 1-step one. With G = 2 the step-wise
  advantage is +-1/sqrt(2): which of the pair does better from that step on.
- Adam with momentum 0.5 (beta2 0.95), not 0.9: consecutive pairs start from different
  states and disagree, and momentum 0.9 keeps a pair's push going for ~10 updates; 0.5 solves
  in fewer env steps (docs/experiments.md, "Adam's momentum").
- Observations in units of CartPole's termination thresholds (cart position / 2.4, pole angle
  / 0.21 rad) and orthogonal hidden layers. Adam moves every weight by about the learning
  rate whatever its input's units; in radians the angle, the input that matters most, moved
  the logits 10x less per step than the cart position. Scaled, runs solve in fewer env steps
  and fewer seeds fall after solving (docs/experiments.md, "Observation units").
Writes <output_dir>/{config.json, metrics.jsonl, summary.json, policy/, checkpoints/}. SIGTERM or
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
from typing import ClassVar

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, GRPOConfig, GRPOTrainer
from grpo_seq.cli import cli_errors, parse_config, require, run_folder
from grpo_seq.errors import ConfigError
from grpo_seq.evaluation import PolicyEvaluator
from grpo_seq.plot import plot_run_if_possible
from grpo_seq.record import check_renderer, record_episode
from grpo_seq.sampling.env import make_env
from grpo_seq.stopping import GracefulStop, checkpoint_on_error
from grpo_seq.tracking import tracker_kwargs


@dataclass
class CartPoleConfig(GRPOConfig):
    env_id: str = field(
        default="CartPole-v1",
        metadata={"help": "Any gymnasium env with Discrete actions and a flat Box observation."},
    )
    total_env_steps: int = field(
        default=50_000,
        metadata={"help": "Training budget in env steps (all processes); the learning rate decays to 0 over it."},
    )
    eval_every: int = field(default=5_000, metadata={"help": "Evaluate after every this many training env steps."})
    eval_episodes: int = field(default=10, metadata={"help": "Greedy episodes per evaluation."})
    solved_return: float = field(default=475.0, metadata={"help": "Eval mean return that counts as solved."})
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64], metadata={"help": "MLP hidden widths."})
    obs_scale: list[float] = field(
        default_factory=list,
        metadata={"help": "Divide each observation dimension by this before the MLP (one number per dimension; "
                  "1s for none). Default: for CartPole, the cart position and pole angle by their termination "
                  "thresholds (2.4 m, 0.21 rad), velocities as they are; none for other envs. Scaled, CartPole "
                  "solves in fewer env steps and fewer seeds fall after solving (docs/experiments.md)."},
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
    # Defaults tuned for CartPole (docs/experiments.md); GRPOConfig's stay the paper's.
    num_generations: int = field(
        default=2, metadata={"help": "G: episodes per shared start state (2: the fewest env steps to solve, docs/experiments.md)."}
    )
    num_groups: int = field(
        default=1, metadata={"help": "Start states per step on each process: one group of G episodes per update "
                             "learns in the fewest env steps (docs/experiments.md)."}
    )
    learning_rate: float = field(default=2e-2, metadata={"help": "Adam learning rate."})
    advantage: str = field(
        default="stepwise",
        metadata={"help": "stepwise (default: returns-to-go compared at equal step indices), outcome (group-"
                  "normalised episode return) or process (the paper's; blind on CartPole: every step pays 1)."},
    )
    gamma: float = field(
        default=0.98, metadata={"help": "Discount inside returns-to-go. With G = 2 and the group std (the defaults) only "
                                "which member ran longer counts, so it changes nothing here; with G > 2 or "
                                "--scale_rewards false it weighs failures near a step more."}
    )
    lr_schedule: str = field(
        default="linear", metadata={"help": "constant, or linear decay to 0 over --total_env_steps."}
    )
    adam_beta1: float = field(
        default=0.5, metadata={"help": "Adam momentum. 0.5, not 0.9: each update sees one pair of episodes, and "
                               "momentum 0.9 keeps pushing a pair's direction for ~10 updates, and solves in more "
                               "env steps (docs/experiments.md)."}
    )
    adam_beta2: float = field(
        default=0.95, metadata={"help": "Adam's decay rate of the squared gradient's running mean (0.95: beside "
                                "beta1 0.5, the value tried that solved every seed, docs/experiments.md)."}
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
        "total_env_steps", "eval_every", "eval_episodes", "solved_return", "record", "torch_threads", "use_cpu",
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("total_env_steps", "eval_every", "eval_episodes", "torch_threads"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        require(self, "hidden_sizes", all(w >= 1 for w in self.hidden_sizes), "every width must be >= 1")
        require(self, "obs_scale", all(math.isfinite(x) and x > 0 for x in self.obs_scale),
                "every divisor must be a finite number > 0")


def default_obs_scale(env_id: str) -> list[float] | None:
    """CartPole's observations in units of its termination thresholds: the pole angle spans only
    +-0.21 rad, so in radians a weight must grow 10x further than for the cart position before
    the angle steers the policy, and Adam moves every weight by about the learning rate."""
    env = make_env(env_id).unwrapped
    try:
        if hasattr(env, "x_threshold") and hasattr(env, "theta_threshold_radians"):
            return [float(env.x_threshold), 1.0, float(env.theta_threshold_radians), 1.0]
        return None
    finally:
        env.close()


def make_policy(args: CartPoleConfig, sampler: EnvGroupSampler) -> CategoricalMLPPolicy:
    """The recipe's policy; ``args.obs_scale`` empty means :func:`default_obs_scale`."""
    scale = args.obs_scale or default_obs_scale(args.env_id)
    if scale is not None and len(scale) != sampler.obs_dim:
        raise ConfigError(f"--obs_scale has {len(scale)} numbers; {args.env_id} observations have {sampler.obs_dim} "
                         "dimensions (give one divisor per dimension)")
    return CategoricalMLPPolicy(sampler.obs_dim, sampler.num_actions, tuple(args.hidden_sizes), obs_scale=scale,
                                orthogonal_init=args.orthogonal_init)


def main(argv: list[str] | None = None) -> None:
    """Train, evaluate and save one run from the command line's options (``argv``, default
    ``sys.argv[1:]``); bad usage ends as one ``error: ...`` line (:func:`grpo_seq.cli.cli_errors`).

    Changes the whole process, as a script's entry point may: seeds the global python, numpy and
    torch RNGs (``accelerate.utils.set_seed``) and sets torch's thread count.
    """
    with cli_errors():
        train(parse_config(CartPoleConfig, argv))


def train(args: CartPoleConfig) -> None:
    """The run itself (see :func:`main`)."""
    # a resumed run goes on in its own folder
    args.output_dir = run_folder(args, f"runs/cartpole__{args.env_id}__{args.seed}__{int(time.time())}")
    torch.set_num_threads(args.torch_threads)
    set_seed(args.seed)  # python, numpy and torch: the policy's initial weights depend on --seed
    accelerator = Accelerator(cpu=args.use_cpu, **tracker_kwargs(args.report_to, args.output_dir))
    main_proc = accelerator.is_main_process
    if args.record and main_proc:  # fail now, not after training, when the renderer is missing
        check_renderer(args.env_id)

    # Each process samples its own whole groups, seeded apart; parameters start equal everywhere.
    sampler = EnvGroupSampler(
        args.env_id, args.num_groups, args.num_generations, seed=args.seed + 1_000_003 * accelerator.process_index
    )
    policy = make_policy(args, sampler)
    trainer = GRPOTrainer(args, policy, sampler, accelerator)
    # Same eval seeds on every process: equal parameters give equal returns, so all agree.
    evaluate = PolicyEvaluator(args.env_id, args.eval_episodes, seed=10_000 + args.seed)

    # Everything the loop carries besides the trainer, so a resumed run repeats an uninterrupted one.
    state = trainer.resume(args.resume_from) if args.resume_from else {}
    eval_seconds = state.get("eval_seconds", 0.0)
    solved_at: dict | None = state.get("solved_at")
    last_eval = state.get("last_eval")
    next_eval = state.get("next_eval", args.eval_every)
    evaluate.seed = state.get("eval_seed", evaluate.seed)
    start = time.perf_counter() - state.get("elapsed", 0.0)

    def loop_state() -> dict:
        return {"eval_seconds": eval_seconds, "solved_at": solved_at, "last_eval": last_eval, "next_eval": next_eval,
                "eval_seed": evaluate.seed, "elapsed": time.perf_counter() - start}

    bar = tqdm(total=args.total_env_steps, initial=min(trainer.env_steps, args.total_env_steps), unit="step",
               disable=not main_proc, desc=args.env_id)
    # the bar closes on an error too, so the error line starts a line of its own
    with bar, GracefulStop() as stop, checkpoint_on_error(trainer, loop_state, args.output_dir):
        while trainer.env_steps < args.total_env_steps:
            m = trainer.step(progress=trainer.env_steps / args.total_env_steps)
            bar.update(min(trainer.env_steps, args.total_env_steps) - bar.n)
            if trainer.env_steps >= next_eval or trainer.env_steps >= args.total_env_steps:
                next_eval = (trainer.env_steps // args.eval_every + 1) * args.eval_every
                t_eval = time.perf_counter()
                last_eval = float(evaluate(trainer.policy).mean())
                eval_seconds += time.perf_counter() - t_eval
                elapsed = time.perf_counter() - start
                trainer.log({"step": trainer.step_count, "perf/tokens_total": trainer.env_steps, "eval/return": last_eval,
                             "eval/seed": evaluate.last_seed, "perf/wall_seconds": elapsed})
                if solved_at is None and last_eval >= args.solved_return:
                    solved_at = {"env_steps": trainer.env_steps, "seconds": elapsed,
                                 "train_seconds": elapsed - eval_seconds, "iteration": trainer.step_count}
                if main_proc:
                    bar.write(f"env steps {trainer.env_steps}: eval return {last_eval:.1f}")
            bar.set_postfix(ret=f"{m['reward/mean']:.0f}", eval=f"{last_eval if last_eval is not None else 0:.0f}")
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
        video = record_episode(trainer.policy, args.env_id, Path(args.output_dir, "agent.gif"), seed=10_000 + args.seed)
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
