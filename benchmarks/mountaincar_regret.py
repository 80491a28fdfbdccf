"""Where MountainCar's greedy policies lose their steps: each step's regret against the optimum.

    python benchmarks/mountaincar_regret.py --seeds 100 101 102 103 104 --sb3
    python benchmarks/mountaincar_regret.py --seeds 100 101 102 103 104 --sb3 --at budget

MountainCar-v0 is deterministic and two-dimensional, so its optimal steps-to-go ``J(x, v)`` can be
computed by value iteration on a grid over the whole state box (``--grid`` cells a side, each next
state rounded to its nearest cell). A policy's regret at a state is the steps it gives away there,
``Q(s, a) - min_b Q(s, b)`` with ``Q(s, a) = 1 + J(s')`` (0 past the flag); summed over a greedy
episode it approximates the steps the episode takes beyond the optimum, and split by step index
and by kind of mistake it says where they go. Episodes run on the env's physics (:func:`step`,
checked against gymnasium's in the tests), from the start states of its resets; the grid's own
greedy policy, played from the same starts, is the reference: how many steps an episode needs at
best.

Each system trains as the control suite runs it (``benchmarks/control_vs_sb3.py``: ours with the
env program's defaults, Stable-Baselines3 PPO with rl-zoo3's settings), and its final policy plays
``--episodes`` greedy episodes from the start states of reset seeds 0, 1, ... ``--at`` says where
the policy is taken: ``solved`` stops as the suite does, 2 evaluations after the first at the
threshold (or at the budget), so it shows the policies the suite calls solved; ``budget`` trains
each run over its whole budget (1M env steps for both), so it shows what each converges to. The
record, ``benchmarks/results/mountaincar_regret/result.json``, keeps one entry per ``--at`` (a run
replaces its own); the benchmark report shows both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

import record  # benchmarks/record.py: default --out and the meta block

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "MountainCar-v0"
X_MIN, X_MAX, V_MAX, GOAL = -1.2, 0.6, 0.07, 0.5
FORCE, GRAVITY = 0.001, 0.0025
# step ranges of the regret split: the first push, the first swing, the rest
RANGES = ((0, 5), (5, 20), (20, 50), (50, 80), (80, 200))
KINDS = ("with the velocity where the optimum pushes against it", "against the velocity where the optimum pushes with it",
         "from a standstill", "coasting, or the optimum coasts")

Actor = Callable[[np.ndarray], np.ndarray]


def step(x: np.ndarray, v: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MountainCarEnv.step's physics on arrays (gymnasium 1.x): ``v += (a - 1) F - cos(3x) g``, clipped;
    ``x += v``, clipped; a car stopped by the left wall loses its leftward velocity."""
    v = np.clip(v + (a - 1) * FORCE + np.cos(3 * x) * (-GRAVITY), -V_MAX, V_MAX)
    x = np.clip(x + v, X_MIN, X_MAX)
    return x, np.where((x == X_MIN) & (v < 0), 0.0, v)


class Grid:
    """The state box in ``nx`` x ``nv`` cells; :meth:`cell` is the flat index of a state's nearest cell."""

    def __init__(self, nx: int, nv: int):
        self.nx, self.nv = nx, nv
        self.xs, self.vs = np.linspace(X_MIN, X_MAX, nx), np.linspace(-V_MAX, V_MAX, nv)

    def cell(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        ix = np.clip(np.rint((x - X_MIN) / (X_MAX - X_MIN) * (self.nx - 1)), 0, self.nx - 1).astype(np.int64)
        iv = np.clip(np.rint((v + V_MAX) / (2 * V_MAX) * (self.nv - 1)), 0, self.nv - 1).astype(np.int64)
        return ix * self.nv + iv


def optimal_steps_to_go(grid: Grid, max_iters: int = 400) -> np.ndarray:
    """Value iteration ``J(s) = min_a [1 + J(s'_a)]`` (``J = 0`` past the flag) over the grid's
    cells, flat; iterates until nothing changes. A cell that cannot reach the flag never converges:
    the box has none (the car reaches the flag from every state)."""
    X, V = np.meshgrid(grid.xs, grid.vs, indexing="ij")
    X, V = X.ravel(), V.ravel()
    nxt, done = [], []
    for a in range(3):
        x2, v2 = step(X, V, np.full_like(X, a))
        nxt.append(grid.cell(x2, v2))
        done.append(x2 >= GOAL)
    J = np.zeros(X.size)
    for _ in range(max_iters):
        new = np.min([1 + np.where(done[a], 0.0, J[nxt[a]]) for a in range(3)], axis=0)
        if np.array_equal(new, J):
            return J
        J = new
    raise RuntimeError(f"value iteration did not settle in {max_iters} sweeps")


def action_values(J: np.ndarray, grid: Grid, x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``Q(s, a) = 1 + J(s'_a)`` (1 where the step reaches the flag), shaped ``(n, 3)``."""
    q = []
    for a in range(3):
        x2, v2 = step(x, v, np.full_like(x, a))
        q.append(1 + np.where(x2 >= GOAL, 0.0, J[grid.cell(x2, v2)]))
    return np.stack(q, axis=1)


def kind(a: np.ndarray, best: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Index into KINDS of each mistake (``a != best``)."""
    push = np.sign(a - 1)
    return np.select([v == 0, (push == 0) | (best == 1), push == np.sign(v)], [2, 3, 0], default=1)


def regret_profile(actor: Actor, J: np.ndarray, grid: Grid, starts: np.ndarray, limit: int = 200) -> dict:
    """Greedy episodes of ``actor`` from ``(x0, 0)`` for each start: mean return, mean regret per episode
    in total, by step range and by kind of mistake."""
    n = len(starts)
    x, v = starts.astype(np.float64), np.zeros(n)
    alive, length = np.ones(n, dtype=bool), np.full(n, limit)
    by_step, by_kind = np.zeros(limit), np.zeros(len(KINDS))
    for t in range(limit):
        a = actor(np.stack([x, v], axis=1).astype(np.float32)).astype(np.int64)
        q = action_values(J, grid, x, v)
        best = q.argmin(axis=1)
        gap = np.where(alive, q[np.arange(n), a] - q[np.arange(n), best], 0.0)
        by_step[t] = gap.sum()
        np.add.at(by_kind, kind(a, best, v), gap)
        x, v = step(x, v, a)
        arrived = alive & (x >= GOAL)
        length[arrived] = t + 1
        alive &= ~arrived
        if not alive.any():
            break
    return {"return": -float(length.mean()), "regret": float(by_step.sum() / n),
            "regret_by_steps": {f"{lo}-{hi}": float(by_step[lo:hi].sum() / n) for lo, hi in RANGES},
            "regret_by_kind": {k: float(r / n) for k, r in zip(KINDS, by_kind)}}


def grid_actor(J: np.ndarray, grid: Grid) -> Actor:
    """The greedy policy of the grid's ``J``: the reference."""
    return lambda obs: action_values(J, grid, obs[:, 0].astype(np.float64), obs[:, 1].astype(np.float64)).argmin(axis=1)


def start_states(episodes: int) -> np.ndarray:
    """The start positions of MountainCar-v0's resets seeded 0, 1, ..., episodes - 1."""
    import gymnasium as gym

    env = gym.make(ENV_ID)
    xs = []
    for s in range(episodes):
        env.reset(seed=s)
        xs.append(float(env.unwrapped.state[0]))
    env.close()
    return np.asarray(xs)


def reached_threshold(curve: list[dict]) -> bool:
    """Whether any evaluation of a run's curve reached MountainCar-v0's ``reward_threshold``."""
    import gymnasium as gym

    threshold = float(gym.spec(ENV_ID).reward_threshold)
    return any(p["return"] >= threshold for p in curve)


# --at: evaluations a run goes on for after its first at the threshold (0: the whole budget)
STOP_AFTER = {"solved": 2, "budget": 0}


def train_ours(seed: int, folder: Path, stop_after: int) -> dict:
    """The env program with its defaults, run as the control suite runs it, in ``folder``; its final policy."""
    from control_vs_sb3 import run_ours
    from grpo_seq.policies.actor import make_actor
    from grpo_seq.io.serialization import load_policy

    run = run_ours(ENV_ID, seed, eval_every=10_000, stop_after=stop_after, keep=folder)
    return {"actor": make_actor(load_policy(folder / "policy"), greedy=True),
            "solved": reached_threshold(run["curve"]), "env_steps": run["env_steps"]}


def train_sb3(seed: int, stop_after: int) -> dict:
    """Stable-Baselines3 PPO with rl-zoo3's settings, trained as the control suite trains it; its final policy."""
    import torch

    from control_vs_sb3 import sb3_train

    torch.set_num_threads(1)
    run, actor = sb3_train(ENV_ID, seed, eval_every=10_000, stop_after=stop_after)
    return {"actor": actor.numpy_actor(greedy=True), "solved": reached_threshold(run["curve"]),
            "env_steps": run["env_steps"]}


def summarise(rows: list[dict]) -> dict:
    """Medians over seeds of the return and of each regret figure."""
    med = statistics.median
    return {"runs": len(rows), "solved": sum(r["solved"] for r in rows), "return": med(r["return"] for r in rows),
            "regret": med(r["regret"] for r in rows),
            "regret_by_steps": {k: med(r["regret_by_steps"][k] for r in rows) for k in rows[0]["regret_by_steps"]},
            "regret_by_kind": {k: med(r["regret_by_kind"][k] for r in rows) for k in KINDS}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102, 103, 104])
    ap.add_argument("--episodes", type=int, default=100, help="greedy episodes per policy (reset seeds 0, 1, ...)")
    ap.add_argument("--grid", type=int, default=1401, help="value-iteration cells per side (position gets 9/7 as many)")
    ap.add_argument("--sb3", action="store_true", help="also Stable-Baselines3 PPO (about a minute a seed; "
                    "--at budget: about three)")
    ap.add_argument("--at", choices=sorted(STOP_AFTER), default="solved",
                    help="where each run's policy is taken: 2 evaluations after solving, as the control suite "
                         "stops, or at the end of its budget")
    ap.add_argument("--out", type=Path, default=record.default_out("mountaincar_regret"))
    a = ap.parse_args()
    grid = Grid(a.grid * 9 // 7, a.grid)
    J = optimal_steps_to_go(grid)
    starts = start_states(a.episodes)
    result = {"meta": record.meta(), "at": a.at, "grid": [grid.nx, grid.nv], "episodes": a.episodes, "seeds": a.seeds,
              "optimum": regret_profile(grid_actor(J, grid), J, grid, starts), "systems": {}}
    print(f"grid optimum: return {result['optimum']['return']:.1f}", flush=True)
    stop_after = STOP_AFTER[a.at]
    for system in ["ours"] + (["sb3"] if a.sb3 else []):
        rows = []
        for seed in a.seeds:
            with tempfile.TemporaryDirectory() as d:
                run = train_ours(seed, Path(d, "run"), stop_after) if system == "ours" else train_sb3(seed, stop_after)
                row = {"seed": seed, "solved": run["solved"], "env_steps": run["env_steps"],
                       **regret_profile(run["actor"], J, grid, starts)}
            rows.append(row)
            print(json.dumps({"system": system, **row}), flush=True)
        result["systems"][system] = {"summary": summarise(rows), "rows": rows}
    kept = json.loads(a.out.read_text()) if a.out.exists() else {}
    record.prepare(a.out).write_text(json.dumps({**kept, a.at: result}, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
