"""Outcome vs process vs step-wise advantages on CartPole, with the recipe's other defaults.

    python benchmarks/cartpole_advantages.py --seeds 0 1 2 3 4 --out advantages.json

Each (advantage, seed) is one `python recipes/cartpole.py` subprocess, alternating advantage
types so machine drift hits all alike. Prints per-seed env steps and seconds to solve, the
final eval return, and medians; writes every row and the medians to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)

ROOT = Path(__file__).resolve().parents[1]


def run(advantage: str, seed: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, str(ROOT / "recipes/cartpole.py"), "--advantage", advantage, "--seed", str(seed),
               "--output_dir", d, *extra]
        env = {**os.environ, "TQDM_DISABLE": "1"}
        subprocess.run(cmd, check=True, env=env, capture_output=True, text=True)
        return json.loads(Path(d, "summary.json").read_text())


def median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--advantages", nargs="+", default=["outcome", "stepwise", "process"])
    ap.add_argument("--out", type=Path, default=record.default_out("cartpole_advantages"))
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="further recipe flags, after --")
    args = ap.parse_args()
    extra = [a for a in args.extra if a != "--"]

    rows = []
    for seed in args.seeds:
        for adv in args.advantages:
            s = run(adv, seed, extra)
            rows.append({"advantage": adv, "seed": seed, **{k: s[k] for k in (
                "solved", "solved_env_steps", "solved_seconds", "final_eval_return", "env_steps", "seconds")}})
            print(json.dumps(rows[-1]), flush=True)
    medians = {}
    print(f"\n{'advantage':<10} {'solved':>7} {'median steps':>13} {'median s':>9} {'min final':>10}")
    for adv in args.advantages:
        mine = [r for r in rows if r["advantage"] == adv]
        medians[adv] = {
            "solved": sum(r["solved"] for r in mine),
            "runs": len(mine),
            "median_solved_env_steps": median([r["solved_env_steps"] for r in mine]),
            "median_solved_seconds": median([r["solved_seconds"] for r in mine]),
            "min_final_eval_return": min(r["final_eval_return"] for r in mine),
        }
        m = medians[adv]
        fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        print(f"{adv:<10} {m['solved']:>3}/{m['runs']:<3} {fmt(m['median_solved_env_steps'], '>13.0f')} "
              f"{fmt(m['median_solved_seconds'], '>9.2f')} {m['min_final_eval_return']:>10.1f}")
    if args.out:
        record.prepare(args.out).write_text(json.dumps({"meta": record.meta(), "rows": rows, "medians": medians, "extra_flags": extra}, indent=2))


if __name__ == "__main__":
    main()
