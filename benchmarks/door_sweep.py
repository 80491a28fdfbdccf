"""What the held-out env benchmarks trained through the SB3 door share (``pixel_grid.py``,
``goal_grid.py``, ``one_step_box.py``): their command line (configs of ``GRPO`` arguments, seeds, a
budget) and env_sweep's JSON (one summary per config, each row's ``final_eval`` the mean greedy
return), so that ``env_sweep.py --from_records`` puts them on the experiments page.

Two configs train no GRPO: ``{"random": true}`` plays the env's random actor (the baseline), and
``{"ppo": true, ...}`` trains Stable-Baselines3's PPO with the same policy name at its own defaults
(the other keys are PPO's arguments), the reference beside it."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import record


def runner(policy: str, make: Callable[[], Any], random_actor: Callable[[int], Callable],
           greedy_return: Callable[[Callable], float]) -> Callable[[int, dict, int], dict]:
    """``run(seed, options, steps)``: train ``GRPO(policy, make(), seed=seed, **options)`` for ``steps``
    env steps (the config ``{"random": true}``: ``random_actor(seed)``, trained on nothing;
    ``{"ppo": true}``: SB3's PPO instead of GRPO), and its row with ``greedy_return`` of the greedy
    actor."""

    def run(seed: int, options: dict, steps: int) -> dict:
        start = time.perf_counter()
        if options.get("random"):
            act = random_actor(seed)
        else:
            if options.get("ppo"):
                from stable_baselines3 import PPO as Algo
            else:
                from grpo_seq import GRPO as Algo
            kwargs = {k: v for k, v in options.items() if k != "ppo"}
            model = Algo(policy, make(), seed=seed, **kwargs)
            model.learn(total_timesteps=steps)
            act = lambda obs: model.predict(obs, deterministic=True)[0]  # noqa: E731
        return row(seed, greedy_return(act), start)

    return run


def mean_return(make: Callable[[], Any], seeds) -> Callable[[Callable], float]:
    """``greedy_return(act)``: the mean return of ``act`` over one episode of ``make()`` per seed."""

    def greedy_return(act: Callable) -> float:
        env, returns = make(), []
        for seed in seeds:
            obs, _ = env.reset(seed=seed)
            done, total = False, 0.0
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                total, done = total + float(reward), terminated or truncated
            returns.append(total)
        return statistics.fmean(returns)

    return greedy_return


def random_actions(space) -> Callable[[int], Callable]:
    """``random_actor(seed)``: uniformly random actions from ``space``, seeded by the seed."""

    def random_actor(seed: int) -> Callable:
        space.seed(seed)
        return lambda obs: space.sample()

    return random_actor


def row(seed: int, final_eval: float, start: float) -> dict:
    """One run as env_sweep records it: no threshold, the greedy return, the seconds since ``start``."""
    return {"seed": seed, "solved_env_steps": None, "solved_seconds": None, "later_evals": [], "threshold": None,
            "final_eval": final_eval, "seconds": time.perf_counter() - start}


def held_out(doc: str, env_name: str, policy: str, make: Callable[[], Any], eval_seeds, steps: int) -> None:
    """:func:`main` for an env ``make()`` builds: random actions from its action space as the
    baseline, the mean greedy return over one episode per seed of ``eval_seeds``."""
    actor = random_actions(make().action_space)
    main(doc, env_name, runner(policy, make, actor, mean_return(make, eval_seeds)), steps)


def main(doc: str, env_name: str, run: Callable[[int, dict, int], dict], steps: int) -> None:
    """Parse the command line, ``run(seed, options, steps)`` every config on every seed, write ``--out``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=["{}"], help="JSON objects of GRPO arguments")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=steps, help="total_timesteps of each run")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    results, meta = [], record.meta()
    for text in a.configs:
        options = json.loads(text)
        rows = [run(seed, options, a.steps) for seed in a.seeds]
        for r in rows:
            print(json.dumps({"config": options, **r}), flush=True)
        results.append({"config": {"env_id": env_name, **options}, "meta": meta,
                        "solved": 0, "runs": len(rows), "median_env_steps": float("inf"),
                        "max_env_steps": float("inf"), "runs_staying_solved": 0, "rows": rows})
        print(f"SUMMARY {text}: median greedy return {statistics.median(r['final_eval'] for r in rows):.3f}")
    record.prepare(a.out).write_text(json.dumps(results, indent=2, default=lambda v: None))
