"""grpo-seq's CartPole recipe against Stable-Baselines3 PPO with rl-zoo3's tuned CartPole-v1 settings.

    python benchmarks/cartpole_vs_sb3.py --seeds 0 1 2 3 4 --out cartpole_vs_sb3.json

Needs the `bench` extra (`pip install -e ".[bench]"`: stable-baselines3, matplotlib).

What runs: for each seed, ours and then SB3 (alternating, so machine drift hits both alike),
each in its own subprocess so that every figure, peak memory included, belongs to one run:
- ours: `python recipes/cartpole.py --seed S --eval_every E` with the
  recipe's defaults otherwise (GRPO, one group of G = 2 episodes per update, one gymnasium
  CartPole env per episode);
- SB3: this script re-invoked with a hidden `--worker sb3` flag: PPO("MlpPolicy") with rl-zoo3's
  hyperparameters for CartPole-v1 (8 envs from `make_vec_env`, n_steps 32, batch 256,
  gae_lambda 0.8, gamma 0.98, 20 epochs, no entropy bonus, learning rate 1e-3 and clip range
  0.2 both decayed linearly to 0), on the CPU like ours.
Each runs with its own default budget (the recipe's 50k env steps, rl-zoo3's 100k for SB3;
both decay their learning rate linearly over it) unless `--total_env_steps` sets one for both;
both get one torch thread: a 64-64 MLP is no faster on two (SB3 here: 5.6 s for 15k env steps on
one thread, 6.4 s on two), and a second thread only contends with whatever else runs.

How it is measured, the same for both:
- Evaluation: `grpo_seq.scoring.evaluation.PolicyEvaluator("CartPole-v1", 10, seed=eval_stream_seed(seed))`,
  10 greedy episodes; SB3's policy goes through a small adapter with the evaluator's interface,
  and both pick greedy actions through the same numpy code (`numpy_actor`: the same three
  matrix products on each system's weights), so an evaluation costs both the same.
  Both evaluate right after the first update whose env steps cross the next multiple of
  `--eval_every`, and once more at the end. For SB3 that is the start of its next rollout
  (an update lands every 256 env steps), so its eval points are 1024, 2048, 3072, ...
- "Solved" is the first evaluation with mean return >= 475; "stays solved" is the fraction of
  evaluations from that one on that are >= 475.
- Wall seconds count from just before training (ours: the recipe's loop start; SB3: just
  before `model.learn`) and include the evaluations; "train s" subtracts the evaluation time.
  SB3 updates every 256 env steps, so it evaluates at nearly every multiple (100 times in 100k
  steps); ours updates on 2 whole episodes (up to 1k env steps once it balances) and so
  evaluates a little less often: compare "train s" where the evaluation count matters.
- Peak RSS is each worker process's own `ru_maxrss`. Ours imports accelerate, transformers'
  argument parser and tqdm; the SB3 worker imports grpo_seq.scoring.evaluation (a ~15 MiB extra).
Differences that remain: SB3 steps a DummyVecEnv of 8 Python gym envs, ours its 2 gym envs
one by one, only those still running; SB3 collects fixed 256-step rollouts, ours whole
episodes (so its env steps per update vary). An unsolved run counts as +inf in medians and ratios; the JSON
writes +inf (and an undefined inf/inf ratio) as null.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "CartPole-v1"
EVAL_EPISODES = 10
SOLVED_RETURN = 475.0
SYSTEMS = ("ours", "sb3")
INF = math.inf
SB3_BUDGET = 100_000  # rl-zoo3's n_timesteps for PPO on CartPole-v1


# -- the SB3 worker (runs in its own process) ---------------------------------------------------


def linear_schedule(initial: float) -> Callable[[float], float]:
    """rl-zoo3's `lin_<x>`: SB3 calls it with progress_remaining, 1 at the start and 0 at the end."""
    return lambda progress_remaining: progress_remaining * initial


class SB3Actor:
    """PolicyEvaluator's interface on an SB3 ActorCriticPolicy: `act(obs, greedy)`, and the same
    numpy fast path our MLP offers (`numpy_actor`), so both systems' greedy actions cost alike."""

    def __init__(self, policy: Any):
        self.policy = policy

    @property
    def numpy_acting(self) -> bool:
        """An MLP on the flat observation acts through numpy; a CNN (MinAtar's frames) through torch."""
        from stable_baselines3.common.torch_layers import FlattenExtractor

        return isinstance(self.policy.features_extractor, FlattenExtractor)

    def act(self, obs: Any, generator: Any = None, greedy: bool = True) -> Any:
        """Actions for a batch of flat observations (an image's back in its shape); sampled ones
        draw from torch's global generator (SB3's distributions take no other)."""
        import torch

        with torch.no_grad():
            obs = obs.reshape(-1, *self.policy.observation_space.shape)
            return self.policy.get_distribution(obs).get_actions(deterministic=greedy)

    def numpy_actor(self, rng: Any = None, greedy: bool = True) -> Callable[[Any], Any]:
        """Greedy: the likeliest action; else one drawn from the policy's softmax by Gumbel-max with
        ``rng`` (a numpy Generator), as our MLP's numpy actor draws (an env evaluated with sampled
        actions: MiniGrid)."""
        import numpy as np
        from torch import nn

        if not greedy and rng is None:
            raise ValueError("SB3Actor.numpy_actor: sampled actions need an rng")
        mods = [*self.policy.mlp_extractor.policy_net, self.policy.action_net]
        layers = [(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy()) for m in mods
                  if isinstance(m, nn.Linear)]
        if not all(isinstance(m, (nn.Linear, nn.Tanh)) for m in mods):
            raise ValueError(f"SB3Actor.numpy_actor expects Linear/Tanh layers, got {mods}")

        def act(obs: Any) -> Any:
            h = obs
            for w, b in layers[:-1]:
                h = np.tanh(h @ w + b)
            w, b = layers[-1]
            logits = h @ w + b
            return (logits if greedy else logits + rng.gumbel(size=logits.shape)).argmax(-1)

        return act


def sb3_worker(seed: int, total_env_steps: int, eval_every: int) -> dict[str, Any]:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger

    from grpo_seq.scoring.evaluation import PolicyEvaluator, eval_stream_seed

    torch.set_num_threads(1)
    evaluate = PolicyEvaluator(ENV_ID, EVAL_EPISODES, seed=eval_stream_seed(seed))
    env = make_vec_env(ENV_ID, n_envs=8, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=linear_schedule(1e-3), clip_range=linear_schedule(0.2),
                seed=seed, device="cpu", verbose=0)
    # SB3's default logger makes an empty folder in the temp dir on every learn() call, even
    # with nothing to write; one without outputs records nothing and creates nothing.
    model.set_logger(Logger(folder=None, output_formats=[]))
    actor = SB3Actor(model.policy)

    class EvalCallback(BaseCallback):
        # Evaluating at a rollout's start sees the policy just updated on exactly num_timesteps
        # env steps, as the recipe does after its updates; mid-rollout it would lag up to 255.
        def __init__(self) -> None:
            super().__init__()
            self.curve: list[dict[str, float]] = []
            self.next_eval, self.eval_seconds, self.start = eval_every, 0.0, 0.0

        def _evaluate(self) -> None:
            t = time.perf_counter()
            ret = float(evaluate(actor).mean())
            self.eval_seconds += time.perf_counter() - t
            elapsed = time.perf_counter() - self.start
            self.curve.append({"env_steps": self.num_timesteps, "seconds": elapsed,
                               "train_seconds": elapsed - self.eval_seconds, "return": ret})
            self.next_eval = (self.num_timesteps // eval_every + 1) * eval_every

        def _on_rollout_start(self) -> None:
            if self.num_timesteps >= self.next_eval:
                self._evaluate()

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            if not self.curve or self.curve[-1]["env_steps"] < self.num_timesteps:
                self._evaluate()

    cb = EvalCallback()
    cb.start = time.perf_counter()
    model.learn(total_timesteps=total_env_steps, callback=cb)
    seconds = time.perf_counter() - cb.start
    return {"curve": cb.curve, "env_steps": model.num_timesteps, "seconds": seconds,
            "eval_seconds": cb.eval_seconds,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


# -- running each system ------------------------------------------------------------------------


def run_ours(seed: int, total_env_steps: int | None, eval_every: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        budget = ["--total_env_steps", str(total_env_steps)] if total_env_steps else []  # else the recipe's
        cmd = [sys.executable, str(ROOT / "recipes/cartpole.py"), "--seed", str(seed), "--eval_every", str(eval_every),
               *budget, "--eval_episodes", str(EVAL_EPISODES), "--solved_return", str(SOLVED_RETURN), "--output_dir", d]
        _check(record.run(cmd, env={**os.environ, "TQDM_DISABLE": "1"}, capture_output=True, text=True), cmd)
        summary = json.loads(Path(d, "summary.json").read_text())
        rows = [json.loads(line) for line in Path(d, "metrics.jsonl").read_text().splitlines()]
    curve = [{"env_steps": r["perf/tokens_total"], "seconds": r["perf/wall_seconds"], "return": r["eval/return"]}
             for r in rows if "eval/return" in r]
    return {"curve": curve, "env_steps": summary["env_steps"], "seconds": summary["seconds"],
            "eval_seconds": summary["eval_seconds"], "peak_rss_gib": summary["peak_rss_gib"],
            "solved_train_seconds": summary["solved_train_seconds"]}


def run_sb3(seed: int, total_env_steps: int | None, eval_every: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "sb3", "--seeds", str(seed),
           "--total_env_steps", str(total_env_steps or SB3_BUDGET), "--eval_every", str(eval_every)]
    out = _check(record.run(cmd, capture_output=True, text=True), cmd)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check(res: subprocess.CompletedProcess, cmd: list[str]) -> subprocess.CompletedProcess:
    if res.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res


def make_row(system: str, seed: int, run: dict[str, Any]) -> dict[str, Any]:
    """Solve figures from the eval curve, the same rule for both systems."""
    curve = run["curve"]
    first = next((i for i, p in enumerate(curve) if p["return"] >= SOLVED_RETURN), None)
    solved = first is not None
    if solved and "train_seconds" not in curve[first]:  # ours: the recipe's own figure
        curve[first]["train_seconds"] = run["solved_train_seconds"]
    after = curve[first:] if solved else []
    return {
        "system": system, "seed": seed, "solved": solved,
        "solved_env_steps": curve[first]["env_steps"] if solved else None,
        "solved_seconds": curve[first]["seconds"] if solved else None,
        "solved_train_seconds": curve[first]["train_seconds"] if solved else None,
        "final_eval_return": curve[-1]["return"],
        "stays_solved": sum(p["return"] >= SOLVED_RETURN for p in after) / len(after) if solved else None,
        "env_steps": run["env_steps"], "seconds": run["seconds"], "eval_seconds": run["eval_seconds"],
        "peak_rss_gib": run["peak_rss_gib"],
        "curve": [{k: p[k] for k in ("env_steps", "seconds", "return")} for p in curve],
    }


# -- summaries ----------------------------------------------------------------------------------


def inf_if_none(x: float | None) -> float:
    return INF if x is None else x


def ratio(a: float, b: float) -> float:
    """a / b with unsolved = inf; inf / inf is undefined (nan)."""
    if math.isinf(a) and math.isinf(b):
        return math.nan
    return INF if math.isinf(a) else a / b if b else INF


def median_of(rows: list[dict], key: str, unsolved_inf: bool) -> float | None:
    xs = [inf_if_none(r[key]) if unsolved_inf else r[key] for r in rows]
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(rows: list[dict], seeds: list[int]) -> dict[str, Any]:
    by = {s: {r["seed"]: r for r in rows if r["system"] == s} for s in SYSTEMS}
    medians = {}
    for s in SYSTEMS:
        mine = list(by[s].values())
        medians[s] = {
            "solved": sum(r["solved"] for r in mine), "runs": len(mine),
            **{k: median_of(mine, k, unsolved_inf=True)
               for k in ("solved_env_steps", "solved_seconds", "solved_train_seconds")},
            **{k: median_of(mine, k, unsolved_inf=False)
               for k in ("final_eval_return", "stays_solved", "seconds", "peak_rss_gib")},
        }
    per_seed_s = [ratio(inf_if_none(by["ours"][k]["solved_seconds"]), inf_if_none(by["sb3"][k]["solved_seconds"]))
                  for k in seeds]
    per_seed_steps = [ratio(inf_if_none(by["ours"][k]["solved_env_steps"]),
                            inf_if_none(by["sb3"][k]["solved_env_steps"])) for k in seeds]
    return {
        "medians": medians,
        "ratio_solve_seconds_median": ratio(medians["ours"]["solved_seconds"], medians["sb3"]["solved_seconds"]),
        "ratio_solve_env_steps_median": ratio(medians["ours"]["solved_env_steps"],
                                              medians["sb3"]["solved_env_steps"]),
        "ratio_solve_seconds_per_seed": per_seed_s,
        "ratio_solve_env_steps_per_seed": per_seed_steps,
        # nan (both unsolved) sorts nowhere: the max is over the defined ratios
        "ratio_solve_seconds_max": max((x for x in per_seed_s if not math.isnan(x)), default=math.nan),
    }


def jsonable(x: Any) -> Any:
    """inf and nan become null: strict JSON has neither."""
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return None
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [jsonable(v) for v in x]
    return x


def machine_info() -> dict[str, Any]:
    import gymnasium
    import stable_baselines3
    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout)
    except OSError:
        commit, dirty = "", False
    return {"platform": platform.platform(), "processor": platform.processor(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__, "gymnasium": gymnasium.__version__,
            "stable_baselines3": stable_baselines3.__version__, "git_commit": commit, "git_dirty": dirty,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


# -- output -------------------------------------------------------------------------------------


def fmt(v: float | None, spec: str) -> str:
    if v is None:
        return "-"
    if math.isnan(v):
        return "n/a"
    return "inf" if math.isinf(v) else format(v, spec)


def print_table(rows: list[dict], summary: dict[str, Any], seeds: list[int]) -> None:
    cols = "| system | seed | solve env steps | solve s | solve train s | final return | stays solved | peak RSS GiB |"
    print("\n" + cols + "\n|" + " --- |" * cols.count(" | ") + " --- |")
    for r in rows:
        print(f"| {r['system']} | {r['seed']} | {fmt(r['solved_env_steps'], ',.0f')} | {fmt(r['solved_seconds'], '.2f')} "
              f"| {fmt(r['solved_train_seconds'], '.2f')} | {r['final_eval_return']:.1f} "
              f"| {fmt(r['stays_solved'], '.2f')} | {r['peak_rss_gib']:.3f} |")
    for s in SYSTEMS:
        m = summary["medians"][s]
        print(f"| **{s} median** | {m['solved']}/{m['runs']} solved | {fmt(m['solved_env_steps'], ',.0f')} "
              f"| {fmt(m['solved_seconds'], '.2f')} | {fmt(m['solved_train_seconds'], '.2f')} "
              f"| {fmt(m['final_eval_return'], '.1f')} | {fmt(m['stays_solved'], '.2f')} | {fmt(m['peak_rss_gib'], '.3f')} |")
    print("\n| ours / SB3 | " + " | ".join(f"seed {k}" for k in seeds) + " | median |")
    print("|" + " --- |" * (len(seeds) + 2))
    for label, key in (("solve seconds", "seconds"), ("solve env steps", "env_steps")):
        per = summary[f"ratio_solve_{key}_per_seed"]
        print(f"| {label} | " + " | ".join(fmt(x, ".2f") for x in per)
              + f" | {fmt(summary[f'ratio_solve_{key}_median'], '.2f')} |")
    print("\n(unsolved = inf; median ratio = median of ours / median of SB3)")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"ours": "tab:blue", "sb3": "tab:orange"}
    labels = {"ours": "grpo-seq (ours)", "sb3": "SB3 PPO (rl-zoo3)"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, x, xlabel in ((axes[0], "env_steps", "env steps"), (axes[1], "seconds", "wall seconds (evals included)")):
        seen = set()
        for r in rows:
            s = r["system"]
            ax.plot([p[x] for p in r["curve"]], [p["return"] for p in r["curve"]], color=colours[s], lw=0.9,
                    alpha=0.8, label=None if s in seen else labels[s])
            seen.add(s)
        ax.axhline(SOLVED_RETURN, color="grey", ls="--", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"greedy eval return ({EVAL_EPISODES} episodes)")
    axes[0].legend(loc="lower right")
    fig.suptitle(f"{ENV_ID}: one line per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--total_env_steps", type=int, default=None,
                    help="training budget of every run (default: each system's own, 250k for ours, 100k for SB3)")
    ap.add_argument("--eval_every", type=int, default=1_000, help="evaluate each time env steps cross a multiple")
    ap.add_argument("--out", type=Path, default=record.default_out("cartpole_vs_sb3"),
                    help="JSON with every row, curve, median and ratio (default: %(default)s)")
    ap.add_argument("--plot", type=Path, default=None, help="PNG of the eval curves (default: --out with .png)")
    ap.add_argument("--worker", choices=["sb3"], default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker == "sb3":
        print(json.dumps(sb3_worker(args.seeds[0], args.total_env_steps, args.eval_every)))
        return

    t0 = time.perf_counter()
    runners = {"ours": run_ours, "sb3": run_sb3}
    rows = []
    for seed in args.seeds:
        for system in SYSTEMS:
            rows.append(make_row(system, seed, runners[system](seed, args.total_env_steps, args.eval_every)))
            r = rows[-1]
            print(f"{system} seed {seed}: solved at {r['solved_env_steps']} env steps, {fmt(r['solved_seconds'], '.2f')} s;"
                  f" final {r['final_eval_return']:.1f}; {r['seconds']:.1f} s in all", flush=True)
    summary = summarise(rows, args.seeds)
    print_table(rows, summary, args.seeds)
    print(f"\n{time.perf_counter() - t0:.0f} s for the whole benchmark")

    plot_path = args.plot or (args.out.with_suffix(".png") if args.out else None)
    if args.out:
        result = {"meta": record.meta(), "command": shlex.join(sys.orig_argv), "machine": machine_info(),
                  "settings": {"env_id": ENV_ID, "seeds": args.seeds, "total_env_steps": args.total_env_steps or {"ours": "recipe default", "sb3": SB3_BUDGET},
                               "eval_every": args.eval_every, "eval_episodes": EVAL_EPISODES,
                               "solved_return": SOLVED_RETURN, "torch_threads": 1},
                  **summary, "rows": rows, "note": "null in a solve figure or ratio: never solved (inf) or inf/inf"}
        record.prepare(args.out).write_text(json.dumps(jsonable(result), indent=2))
    if plot_path:
        plot(rows, plot_path)


if __name__ == "__main__":
    main()
