"""Env steps to solve CartPole for several settings of the recipe, many seeds, in one process.

    python benchmarks/cartpole_sweep.py --seeds 0 1 2 3 4 5 6 7 --configs '{}' '{"num_generations": 2}'

Each config is a JSON object of `recipes/cartpole.py` options over its defaults. Every run
trains as the recipe does and evaluates 10 greedy episodes (`PolicyEvaluator`, the same seeds
as the recipe) after the first update past every `--eval_every` env steps; "solved" is the
first evaluation with mean >= 475. A run stops `--after` evaluations past solving (their
returns show whether it stays solved) or at `--cap` env steps. Env steps to solve are exact
and machine-independent for a seed; the seconds are only indicative (one process, no warm-up
excluded, evaluations included). Prints one line per run and a summary per config; `--out`
writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))
from cartpole import CartPoleConfig, make_policy  # noqa: E402

from grpo_seq import EnvGroupSampler, GRPOTrainer  # noqa: E402
from grpo_seq.evaluation import PolicyEvaluator  # noqa: E402

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)


def run(seed: int, overrides: dict, eval_every: int, cap: int, after: int, accelerator: Accelerator) -> dict:
    args = CartPoleConfig(seed=seed, **overrides)
    set_seed(seed)
    sampler = EnvGroupSampler(args.env_id, args.num_groups, args.num_generations, seed=seed)
    policy = make_policy(args, sampler)
    trainer = GRPOTrainer(args, policy, sampler, accelerator)
    evaluate = PolicyEvaluator(args.env_id, args.eval_episodes, seed=10_000 + seed)
    next_eval, solved, later, start = eval_every, None, [], time.perf_counter()
    while trainer.env_steps < min(cap, args.total_env_steps):
        trainer.step(progress=trainer.env_steps / args.total_env_steps)
        if trainer.env_steps < next_eval:
            continue
        next_eval = (trainer.env_steps // eval_every + 1) * eval_every
        ret = float(evaluate(trainer.policy).mean())
        if solved is not None:
            later.append(ret)
            if len(later) >= after:
                break
        elif ret >= args.solved_return:
            solved = {"env_steps": trainer.env_steps, "seconds": time.perf_counter() - start}
    return {"seed": seed, "solved_env_steps": solved and solved["env_steps"],
            "solved_seconds": solved and solved["seconds"], "later_evals": later}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=["{}"], help="JSON objects of recipe options")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    ap.add_argument("--eval_every", type=int, default=1000)
    ap.add_argument("--cap", type=int, default=60_000, help="stop an unsolved run after this many env steps")
    ap.add_argument("--after", type=int, default=3, help="evaluations kept after solving")
    ap.add_argument("--out", type=Path, default=record.default_out("cartpole_sweep"),
                    help="JSON: one summary per config, each with every run and the meta block (default: %(default)s)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    results, meta = [], record.meta()
    for text in a.configs:
        overrides = json.loads(text)
        rows = []
        for seed in a.seeds:
            rows.append(run(seed, overrides, a.eval_every, a.cap, a.after, accelerator))
            print(json.dumps({"config": overrides, **rows[-1]}), flush=True)
        steps = [r["solved_env_steps"] or float("inf") for r in rows]
        later = [min(r["later_evals"], default=0.0) for r in rows if r["solved_env_steps"]]
        summary = {"config": overrides, "meta": meta, "solved": sum(s < float("inf") for s in steps), "runs": len(rows),
                   "median_env_steps": statistics.median(steps), "max_env_steps": max(steps),
                   "runs_staying_solved": sum(x >= 475 for x in later), "rows": rows}
        results.append(summary)
        print(f"SUMMARY {json.dumps(overrides)}: solved {summary['solved']}/{len(rows)}, median "
              f"{summary['median_env_steps']:.0f} env steps, max {summary['max_env_steps']:.0f}, "
              f"{summary['runs_staying_solved']} stayed >= 475 for {a.after} evaluations", flush=True)
        if a.out:  # after every config, so a long sweep cut short keeps what it measured
            record.prepare(a.out).write_text(json.dumps(results, indent=2, default=lambda v: None))


if __name__ == "__main__":
    main()
