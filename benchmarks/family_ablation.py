"""The GRPO family's recipes on the control suite: which loss wins each env, over seeds.

    python benchmarks/family_ablation.py --env CartPole-v1 --seeds 1000-1019 --eval_every 1000
    python benchmarks/family_ablation.py --env Acrobot-v1 --seeds 1000-1019 --eval_every 5000
    python benchmarks/family_ablation.py --env CartPole-v1 --over '{"mu": 4}' --seeds 1000-1019
    python benchmarks/family_ablation.py --summarise        # recompute the summary, run nothing

Each variant is the env recipe's defaults (`grpo_seq.envs.defaults`) with the options of one
paper's recipe over them (``VARIANTS``). A run trains the env's whole budget
(``total_env_steps``) with ``benchmarks/env_sweep.py``'s ``run`` and evaluates 10 greedy episodes
after the first update past every ``--eval_every`` env steps: solved = the first evaluation at or
above the env's threshold, final return = the last evaluation, at the end of the budget. Seeds run
in the outer loop and variants in the inner one, so a sweep cut short leaves every variant with
about the same seeds. ``--over`` puts options under every variant (an arm of its own in the summary):
with the env defaults' one pass over each batch (``mu`` 1, one minibatch) every ratio is 1 where
the gradient is taken, so the clipping ranges of DAPO, GSPO and CISPO act only with ``--mu`` above 1. The record, ``benchmarks/results/family_ablation/result.json``, is rewritten
after every run; a run already in it (same env, variant and seed) is skipped, so a second command
with more seeds extends it. Its ``summary`` holds per env and variant the share solved, the
medians of env steps and seconds to solve (unsolved counts as infinite) and of the final return,
and against the defaults a bootstrap interval of the difference in median final return.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import statistics
import time
from pathlib import Path

import env_sweep  # benchmarks/env_sweep.py: one training run with its evaluations
import record  # benchmarks/record.py: default --out and the meta block

RECORD = record.default_out("family_ablation")
# One paper's recipe each, over the env's tuned defaults (loss_type bnpo there).
VARIANTS = {
    "defaults": {},
    "dapo": {"loss_type": "dapo", "epsilon_high": 0.28, "dynamic_sampling": True},
    "gspo": {"importance_sampling_level": "sequence", "loss_type": "grpo", "epsilon": 3e-4, "epsilon_high": 4e-4},
    "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": False},
    "cispo": {"loss_type": "cispo", "epsilon_high": 5.0},
}
BOOTSTRAP = 2000  # resamples of the seeds for each interval


@contextlib.contextmanager
def recorded_evaluations():
    """Every evaluation's mean return during the block, in order (``env_sweep.run`` keeps only
    those after solving): ``grpo_seq.scoring.evaluation.PolicyEvaluator`` wrapped while it lasts."""
    import grpo_seq.scoring.evaluation as evaluation

    original, returns = evaluation.PolicyEvaluator, []

    class Recording(original):
        def __call__(self, policy, seed=None):
            out = super().__call__(policy, seed)
            returns.append(float(out.mean()))
            return out

    evaluation.PolicyEvaluator = Recording
    try:
        yield returns
    finally:
        evaluation.PolicyEvaluator = original


def one_run(env_id: str, over: dict, variant: str, seed: int, eval_every: int, accelerator) -> dict:
    """Train ``variant`` (with ``over`` under it) on ``env_id`` for the whole budget; its solve and every evaluation."""
    start = time.perf_counter()
    with recorded_evaluations() as returns:
        row = env_sweep.run(seed, {"env_id": env_id, **over, **VARIANTS[variant]}, eval_every, budget(env_id, over),
                            10**9, accelerator)
    return {"env_id": env_id, "over": over, "arm": arm(env_id, over), "variant": variant, **row, "evals": returns,
            "final_return": returns[-1] if returns else None, "seconds": time.perf_counter() - start}


def arm(env_id: str, over: dict) -> str:
    """The env, and the options under every variant where there are any: ``CartPole-v1 --mu 4``."""
    return " ".join([env_id, *(f"--{k} {v}" for k, v in over.items())])


def budget(env_id: str, over: dict) -> int:
    from grpo_seq.envs.defaults import per_env

    return {**per_env(env_id), **over}["total_env_steps"]


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"runs": []}


def seed_list(text: str) -> list[int]:
    """``1000-1019`` or ``1000,1003`` or both, comma-separated."""
    seeds = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi or lo) + 1))
    return seeds


def median_diff_interval(a: list[float], b: list[float], rng: random.Random) -> list[float]:
    """95% bootstrap interval of median(a) - median(b), each resampled with replacement."""
    diffs = sorted(statistics.median(rng.choices(a, k=len(a))) - statistics.median(rng.choices(b, k=len(b)))
                   for _ in range(BOOTSTRAP))
    return [diffs[int(0.025 * BOOTSTRAP)], diffs[int(0.975 * BOOTSTRAP) - 1]]


def summarise(runs: list[dict]) -> dict:
    """Per env and variant: solved, medians (unsolved = inf steps and seconds, final return of a run
    without one = -inf) and bootstrap intervals of its median final return and env steps to solve
    minus the defaults' (there an unsolved run counts as the env's budget)."""
    rng, out = random.Random(0), {}
    for key in dict.fromkeys(r.get("arm", r["env_id"]) for r in runs):
        finals, steps = {}, {}
        for variant in VARIANTS:
            rows = [r for r in runs if r.get("arm", r["env_id"]) == key and r["variant"] == variant]
            if not rows:
                continue
            finals[variant] = [r["final_return"] if r["final_return"] is not None else -math.inf for r in rows]
            cap = budget(rows[0]["env_id"], rows[0].get("over", {}))  # an unsolved run's steps in the interval
            steps[variant] = [r["solved_env_steps"] or cap for r in rows]
            out.setdefault(key, {})[variant] = {
                "runs": len(rows), "solved": sum(bool(r["solved_env_steps"]) for r in rows),
                "median_env_steps": statistics.median(r["solved_env_steps"] or math.inf for r in rows),
                "median_seconds": statistics.median(r["solved_seconds"] or math.inf for r in rows),
                "median_final_return": statistics.median(finals[variant]),
                "final_at_threshold": sum(f >= r["threshold"] for f, r in zip(finals[variant], rows)),
                "seeds": [r["seed"] for r in rows]}
        for variant, sm in out.get(key, {}).items():
            if variant != "defaults" and "defaults" in finals:
                sm["final_minus_defaults_ci95"] = median_diff_interval(finals[variant], finals["defaults"], rng)
                sm["env_steps_minus_defaults_ci95"] = median_diff_interval(steps[variant], steps["defaults"], rng)
    plain_vs_over(runs, out, rng)
    return out


def plain_vs_over(runs: list[dict], out: dict, rng: random.Random) -> None:
    """An arm with options over the env (``Acrobot-v1 --num_generations 8``): its defaults against
    the plain env arm's defaults, the intervals of the differences in median final return and env
    steps to solve (what moves an env default)."""
    for key, variants in out.items():
        rows = [r for r in runs if r.get("arm", r["env_id"]) == key and r["variant"] == "defaults"]
        if not rows or not rows[0].get("over") or "defaults" not in variants:
            continue
        plain = [r for r in runs if r.get("arm", r["env_id"]) == rows[0]["env_id"] and r["variant"] == "defaults"]
        if not plain:
            continue
        cap = budget(rows[0]["env_id"], rows[0].get("over", {}))
        final = lambda rs: [r["final_return"] if r["final_return"] is not None else -math.inf for r in rs]  # noqa: E731
        steps = lambda rs: [r["solved_env_steps"] or cap for r in rs]  # noqa: E731
        variants["defaults"]["final_minus_env_defaults_ci95"] = median_diff_interval(final(rows), final(plain), rng)
        variants["defaults"]["env_steps_minus_env_defaults_ci95"] = median_diff_interval(steps(rows), steps(plain), rng)


def write(path: Path, doc: dict) -> None:
    doc["summary"] = summarise(doc["runs"])
    tmp = record.prepare(path).with_suffix(".tmp")  # then renamed: a sweep stopped mid-write keeps its record
    tmp.write_text(json.dumps(doc, indent=2, default=lambda v: None) + "\n")
    tmp.replace(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="CartPole-v1", help="gymnasium env id")
    ap.add_argument("--seeds", type=seed_list, default=seed_list("1000-1009"), help="e.g. 1000-1019")
    ap.add_argument("--over", type=json.loads, default={},
                    help='JSON options under every variant, e.g. \'{"mu": 4}\' (a separate arm of the summary)')
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--eval_every", type=int, default=1000, help="env steps between greedy evaluations")
    ap.add_argument("--out", type=Path, default=RECORD)
    ap.add_argument("--summarise", action="store_true", help="recompute the record's summary, run nothing")
    a = ap.parse_args()
    doc = load(a.out)
    if a.summarise:
        return write(a.out, doc)
    import torch
    from accelerate import Accelerator

    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    doc.setdefault("meta", []).append(record.meta())  # one per command that added runs
    doc.setdefault("settings", {}).setdefault("eval_every", {})[arm(a.env, a.over)] = a.eval_every
    doc["settings"]["variants"] = VARIANTS
    done = {(r.get("arm", r["env_id"]), r["variant"], r["seed"]) for r in doc["runs"]}
    for seed in a.seeds:
        for variant in a.variants:
            if (arm(a.env, a.over), variant, seed) in done:
                continue
            doc["runs"].append(one_run(a.env, a.over, variant, seed, a.eval_every, accelerator))
            print(json.dumps({k: v for k, v in doc["runs"][-1].items() if k not in ("evals", "later_evals")}), flush=True)
            write(a.out, doc)


if __name__ == "__main__":
    main()
