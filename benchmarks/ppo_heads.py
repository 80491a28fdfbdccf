"""Would a Gaussian head do better than bins? Stable-Baselines3 PPO with rl-zoo3's settings for an env
with continuous actions, three heads on the same runs' protocol:

- ``gaussian``: rl-zoo3's own policy (a diagonal Gaussian, gSDE where its entry says ``use_sde``);
- ``gaussian_no_sde``: the same Gaussian with plain per-step noise (gSDE off);
- ``bins``: the same PPO whose policy picks one of K evenly spaced values per action dimension
  (``MultiDiscrete``, one categorical each: our policies' head), K our family's ``action_bins`` for
  the env; gSDE, which only a Gaussian has, off.

    python benchmarks/ppo_heads.py --envs Pendulum-v1 MountainCarContinuous-v0 --seeds 2000 2001 2002 2003 2004

PPO's critic, GAE and budget are the same in every arm, so what differs is the head alone: if
bins solve as often and end as high as the Gaussian here, a Gaussian head is not what our
discretised policies lack. Each run is ``control_vs_sb3.py``'s SB3 run (its evaluation: 10 greedy
episodes every ``--eval_every`` env steps, on the env's own actions), in its own process, runs
alternating arms from seed to seed. Needs the ``bench`` and ``control`` extras.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import record  # benchmarks/record.py: default --out and the meta block
from cartpole_vs_sb3 import fmt, inf_if_none, jsonable
from control_vs_sb3 import EVAL_EVERY, make_row, sb3_train, threshold_of, zoo_settings

ARMS = ("gaussian", "gaussian_no_sde", "bins")
LABELS = {"gaussian": "Gaussian (rl-zoo3's, gSDE where it says)", "gaussian_no_sde": "Gaussian, gSDE off",
          "bins": "bins (one categorical per dimension)"}
SDE_ONLY = ("use_sde", "sde_sample_freq")


def arm_settings(env_id: str, arm: str) -> tuple[dict[str, Any], int | None]:
    """rl-zoo3's PPO entry for the arm, and its bins (None: the Gaussian)."""
    from grpo_seq.envs.defaults import per_env
    from grpo_seq.sampling.spaces import ACTION_BINS

    zoo = zoo_settings(env_id)
    if arm == "gaussian":
        return zoo, None
    zoo = {k: v for k, v in zoo.items() if k not in SDE_ONLY}
    return zoo, (per_env(env_id).get("action_bins") or ACTION_BINS) if arm == "bins" else None


def run(env_id: str, seed: int, arm: str, eval_every: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", arm, "--envs", env_id, "--seeds", str(seed),
           "--eval_every", str(eval_every)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def summarise(rows: list[dict], env_id: str) -> dict[str, Any]:
    """Per arm: runs solved, median env steps to solve (unsolved = inf), median final return."""
    out = {}
    for arm in ARMS:
        mine = [r for r in rows if r["env_id"] == env_id and r["system"] == arm]
        if mine:
            out[arm] = {"solved": sum(bool(r["solved"]) for r in mine), "runs": len(mine), "bins": mine[0].get("bins"),
                        "solved_env_steps": statistics.median(inf_if_none(r["solved_env_steps"]) for r in mine),
                        "final_eval_return": statistics.median(r["final_eval_return"] for r in mine)}
    return out


def plot(rows: list[dict], envs: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"gaussian": "tab:orange", "gaussian_no_sde": "tab:red", "bins": "tab:blue"}
    fig, axes = plt.subplots(1, len(envs), figsize=(4.6 * len(envs), 3.6), squeeze=False)
    for ax, env_id in zip(axes[0], envs):
        seen = set()
        for r in (r for r in rows if r["env_id"] == env_id):
            arm = r["system"]
            ax.plot([p["env_steps"] for p in r["curve"]], [p["return"] for p in r["curve"]], color=colours[arm],
                    lw=0.9, alpha=0.8, label=None if arm in seen else LABELS[arm])
            seen.add(arm)
        if threshold_of(env_id) is not None:
            ax.axhline(threshold_of(env_id), color="grey", ls="--", lw=0.8)
        ax.set_title(env_id)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    axes[0][0].set_ylabel("greedy eval return (10 episodes)")
    fig.suptitle("SB3 PPO, rl-zoo3's settings: one line per seed; dashed: threshold")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", nargs="+", default=["Pendulum-v1", "MountainCarContinuous-v0"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[2000, 2001, 2002, 2003, 2004])
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    ap.add_argument("--eval_every", type=int, default=None, help="default: per env, as control_vs_sb3.py")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once, each in its own process")
    ap.add_argument("--out", type=Path, default=record.default_out("ppo_heads"))
    ap.add_argument("--worker", choices=ARMS, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    every = lambda env_id: args.eval_every or EVAL_EVERY.get(env_id, 10_000)  # noqa: E731

    if args.worker:  # one run, in this process: its record on the last line of stdout
        env_id, seed = args.envs[0], args.seeds[0]
        zoo, bins = arm_settings(env_id, args.worker)
        result = sb3_train(env_id, seed, every(env_id), 0, zoo=zoo, bins=bins)[0]
        print(json.dumps({**result, "bins": bins}))
        return

    arms = lambda k: args.arms if k % 2 == 0 else args.arms[::-1]  # noqa: E731
    tasks = [(e, s, a) for e in args.envs for k, s in enumerate(args.seeds) for a in arms(k)]
    rows: list[dict] = []

    def one(task: tuple[str, int, str]) -> dict[str, Any]:
        env_id, seed, arm = task
        result = run(env_id, seed, arm, every(env_id))
        row = {**make_row(env_id, arm, seed, result, threshold_of(env_id)), "bins": result["bins"]}
        print(f"{env_id} {arm} seed {seed}: solved at {row['solved_env_steps']} env steps; final "
              f"{row['final_eval_return']:.1f}", flush=True)
        return row

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for row in pool.map(one, tasks):
            rows.append(row)
            envs = [e for e in args.envs if any(r["env_id"] == e for r in rows)]
            out = {"meta": record.meta(), "settings": {"envs": envs, "seeds": args.seeds, "arms": args.arms,
                                                        "eval_every": {e: every(e) for e in envs},
                                                        "thresholds": {e: threshold_of(e) for e in envs}},
                   "summary": {e: summarise(rows, e) for e in envs}, "rows": rows,
                   "note": "null in solved_env_steps: never solved (inf)"}
            record.prepare(args.out).write_text(json.dumps(jsonable(out), indent=2))
            plot(rows, envs, args.out.with_suffix(".png"))
    for e in args.envs:
        for arm, s in summarise(rows, e).items():
            print(f"{e} {arm}: {s['solved']}/{s['runs']} solved, median env steps {fmt(s['solved_env_steps'], '.0f')}, "
                  f"final {s['final_eval_return']:.1f}")


if __name__ == "__main__":
    main()
