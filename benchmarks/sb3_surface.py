"""The Stable-Baselines3-style ``GRPO`` on CartPole: against the recipe's own loop, and its group modes.

    python benchmarks/sb3_surface.py --question recipe --seeds 0 1 2 3 4 5 6 7 8 9
    python benchmarks/sb3_surface.py --question modes --seeds $(seq 0 19)

``recipe``: for each seed, the loop of ``recipes/cartpole.py`` (as ``benchmarks/env_sweep.py``
runs it: CartPoleConfig, make_policy, GRPOLoop) and ``GRPO("MlpPolicy", "CartPole-v1",
seed=S).learn(50_000, callback=...)``, alternating which goes first. ``modes``: the surface's
episode groups against per-state alternatives (``group_mode="alternatives"``), with and without a
shaped ``reward_function``. Every run evaluates 10 greedy episodes (``PolicyEvaluator``, seed
``eval_stream_seed(S)``, as the recipe) after the first update past every ``--eval_every`` env steps and stops
at the first mean >= 475 ("solved") or at ``--cap`` env steps. Seconds are wall time from the
start of training to solving, evaluations included, one process, one torch thread.
Writes ``benchmarks/results/sb3_surface/result.json`` or ``benchmarks/results/sb3_alternatives/result.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))
from cartpole import CartPoleConfig, make_policy  # noqa: E402

from grpo_seq import GRPO, EnvGroupSampler, GRPOLoop  # noqa: E402
from grpo_seq.scoring.evaluation import PolicyEvaluator, eval_stream_seed  # noqa: E402

import record  # noqa: E402

SOLVED = 475.0


def upright(state: torch.Tensor, action: torch.Tensor, next_state: torch.Tensor) -> torch.Tensor:
    """A shaped CartPole reward in (0.4, 1]: pole upright and turning upright, cart near the centre."""
    tilt = (next_state[:, 2] / 0.21 + 0.5 * next_state[:, 3]).abs().clamp(max=1)
    return 1 - 0.5 * tilt - 0.1 * (next_state[:, 0] / 2.4).abs().clamp(max=1)


MODES: dict[str, dict[str, Any]] = {
    "episodes (defaults)": {},
    "episodes + upright reward": {"reward_function": upright},
    "alternatives H=1 + upright reward": {"group_mode": "alternatives", "reward_function": upright},
    "alternatives H=20, env reward": {"group_mode": "alternatives", "horizon": 20, "num_groups": 4},
}


def recipe_run(seed: int, eval_every: int, cap: int, accelerator: Accelerator) -> dict:
    args = CartPoleConfig(seed=seed)
    set_seed(seed)
    sampler = EnvGroupSampler(args.env_id, args.num_groups, args.num_generations, seed=seed)
    trainer = GRPOLoop(args, make_policy(args, sampler), sampler, accelerator)
    evaluate = PolicyEvaluator(args.env_id, 10, seed=eval_stream_seed(seed))
    start, next_eval = time.perf_counter(), eval_every
    while trainer.tokens_sampled < cap:
        trainer.step(progress=trainer.tokens_sampled / args.total_env_steps)
        if trainer.tokens_sampled >= next_eval:
            next_eval = (trainer.tokens_sampled // eval_every + 1) * eval_every
            if float(evaluate(trainer.policy).mean()) >= SOLVED:
                return {"solved_env_steps": trainer.tokens_sampled, "solved_seconds": time.perf_counter() - start}
    return {"solved_env_steps": None, "solved_seconds": None}


class SolveWatch:
    """A plain callback for ``GRPO.learn``: evaluates at the first ``on_step`` after each update past
    the next multiple of ``eval_every``, and stops training once solved."""

    def __init__(self, model: GRPO, seed: int, eval_every: int):
        self.model, self.every, self.next = model, eval_every, eval_every
        self.evaluate = PolicyEvaluator("CartPole-v1", 10, seed=eval_stream_seed(seed))
        self.iteration, self.solved, self.start = 0, None, time.perf_counter()

    def __call__(self, locals_: dict, globals_: dict) -> bool:
        if locals_["iteration"] == self.iteration:
            return True
        self.iteration = locals_["iteration"]
        steps = self.model._sampler_total  # the update's end, as the recipe's loop counts
        if steps >= self.next:
            self.next = (steps // self.every + 1) * self.every
            if float(self.evaluate(self.model.policy).mean()) >= SOLVED:
                self.solved = {"solved_env_steps": steps, "solved_seconds": time.perf_counter() - self.start}
                return False
        return True


def surface_run(seed: int, eval_every: int, cap: int, **kwargs: Any) -> dict:
    model = GRPO("MlpPolicy", "CartPole-v1", seed=seed, **kwargs)
    watch = SolveWatch(model, seed, eval_every)
    model.learn(cap, callback=watch)
    return watch.solved or {"solved_env_steps": None, "solved_seconds": None}


def summary(rows: list[dict]) -> dict:
    inf = float("inf")
    steps = [r["solved_env_steps"] or inf for r in rows]
    secs = [r["solved_seconds"] or inf for r in rows]
    return {"solved": sum(s < inf for s in steps), "runs": len(rows), "median_env_steps": statistics.median(steps),
            "median_seconds": statistics.median(secs), "max_env_steps": max(steps)}


def compare_recipe(seeds: list[int], eval_every: int, cap: int) -> dict:
    accelerator, rows = Accelerator(cpu=True), []
    for i, seed in enumerate(seeds):
        runs: dict[str, Callable[[], dict]] = {"recipe": lambda: recipe_run(seed, eval_every, cap, accelerator),
                                              "GRPO": lambda: surface_run(seed, eval_every, cap)}
        for name in (list(runs) if i % 2 == 0 else list(runs)[::-1]):
            rows.append({"system": name, "seed": seed, **runs[name]()})
            print(json.dumps(rows[-1]), flush=True)
    by = {s: summary([r for r in rows if r["system"] == s]) for s in ("recipe", "GRPO")}
    runs = {(r["system"], r["seed"]): r["solved_seconds"] for r in rows}
    ratios = [runs["GRPO", s] / runs["recipe", s] for s in seeds if runs["GRPO", s] and runs["recipe", s]]
    return {"summaries": by, "ratio_seconds_GRPO_over_recipe_median": statistics.median(ratios) if ratios else None,
            "ratio_seconds_per_seed": ratios, "rows": rows}


def compare_modes(seeds: list[int], eval_every: int, cap: int) -> dict:
    rows = []
    for name, kwargs in MODES.items():
        for seed in seeds:
            rows.append({"mode": name, "seed": seed, **surface_run(seed, eval_every, cap, **kwargs)})
            print(json.dumps(rows[-1]), flush=True)
    return {"modes": {name: {k: (v.__name__ if callable(v) else v) for k, v in kw.items()} for name, kw in MODES.items()},
            "summaries": {name: summary([r for r in rows if r["mode"] == name]) for name in MODES}, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--question", choices=["recipe", "modes"], required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--eval_every", type=int, default=1000)
    ap.add_argument("--cap", type=int, default=50_000, help="stop an unsolved run after this many env steps")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    meta = record.meta()
    result = compare_recipe(a.seeds, a.eval_every, a.cap) if a.question == "recipe" else \
        compare_modes(a.seeds, a.eval_every, a.cap)
    out = a.out or record.default_out("sb3_surface" if a.question == "recipe" else "sb3_alternatives")
    record.prepare(out).write_text(json.dumps({"meta": meta, **result}, indent=2, default=lambda v: None))
    print(json.dumps(result["summaries"], indent=2), "\n", {k: v for k, v in result.items() if k.startswith("ratio")})


if __name__ == "__main__":
    main()
