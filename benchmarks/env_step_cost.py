"""What an env step costs: CartPole's numpy-vectorised env against one gym env per episode, and a
continuous-action env stepped through the token codec against the same env stepped with its own actions.

    python benchmarks/env_step_cost.py --repeats 5

EnvGroupSampler steps one `gym.make` env per episode (only the running ones) below
`_VECTOR_MIN_ENVS` episodes, and the numpy-vectorised CartPole from there on. This prints,
for several env counts, the median over --repeats of:
- `vector`: one `step` call of the numpy-vectorised CartPole with n envs (microseconds);
- `one by one`: n `step` calls, one per `gym.make("CartPole-v1")` env (microseconds);
- `sampler`: process CPU time of `EnvGroupSampler.sample` per env step, on each path, for
  groups of 2 episodes of a fixed random policy (whole episodes, both paths the same rollouts
  in distribution).
- `codec`: one `step` of Pendulum-v1 (a Box action, 21 values) with its own action, and through
  `as_tokens` with a token (the codec's decoding and flattening on top of the env's step).
Process CPU time, one torch thread: the host's other load changes it less than wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler  # noqa: E402
import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)
from grpo_seq.sampling import env as env_module  # noqa: E402
from grpo_seq.sampling.env import as_tokens  # noqa: E402


def per_call_us(fn, calls: int) -> float:
    t = time.process_time()
    for _ in range(calls):
        fn()
    return 1e6 * (time.process_time() - t) / calls


def step_costs(n: int, calls: int) -> tuple[float, float]:
    vec = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point")
    vec.reset(seed=0)
    actions = np.zeros(n, dtype=np.int64)
    singles = [gym.make("CartPole-v1") for _ in range(n)]
    for i, e in enumerate(singles):
        e.reset(seed=i)

    def one_by_one() -> None:
        for i, e in enumerate(singles):
            _, _, terminated, truncated, _ = e.step(i % 2)  # alternating pushes: long episodes, few resets
            if terminated or truncated:
                e.reset()

    return per_call_us(lambda: vec.step(actions), calls), per_call_us(one_by_one, calls)


def codec_costs(env_id: str, bins: int, calls: int) -> tuple[float, float]:
    """Microseconds per step of ``env_id`` with its own action, and through the token codec."""
    own, coded = gym.make(env_id), as_tokens(gym.make(env_id), env_id, bins)
    own.reset(seed=0)
    coded.reset(seed=0)
    action, token = own.action_space.sample(), np.int64(bins // 3)

    def step(env, a) -> None:
        if any(env.step(a)[2:4]):
            env.reset()

    return per_call_us(lambda: step(own, action), calls), per_call_us(lambda: step(coded, token), calls)


def sampler_cost(groups: int, vector: bool, batches: int) -> float:
    saved = env_module._VECTOR_MIN_ENVS
    env_module._VECTOR_MIN_ENVS = 1 if vector else 10**9
    try:
        sampler = EnvGroupSampler("CartPole-v1", groups, 2, seed=0)
    finally:
        env_module._VECTOR_MIN_ENVS = saved
    torch.manual_seed(0)
    policy = CategoricalMLPPolicy(sampler.obs_dim, sampler.num_actions)
    t = time.process_time()
    for _ in range(batches):
        sampler.sample(policy)
    return 1e6 * (time.process_time() - t) / sampler.env_steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--envs", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--out", type=Path, default=record.default_out("env_step_cost"),
                    help="JSON of the table and the meta block (default: %(default)s; '' for none)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    print("| envs | vector step, us | one by one, us | sampler us/env step, vector | sampler us/env step, one by one |")
    print("| --- | --- | --- | --- | --- |")
    for n in a.envs:
        costs = [step_costs(n, a.calls) for _ in range(a.repeats)]
        groups = max(1, n // 2)
        samp_vec = [sampler_cost(groups, True, 200 // groups) for _ in range(a.repeats)]
        samp_one = [sampler_cost(groups, False, 200 // groups) for _ in range(a.repeats)]
        med = statistics.median
        rows.append({"envs": n, "vector_step_us": med(c[0] for c in costs), "one_by_one_us": med(c[1] for c in costs),
                     "sampler_us_per_env_step_vector": med(samp_vec), "sampler_us_per_env_step_one_by_one": med(samp_one)})
        print(f"| {n} | {med(c[0] for c in costs):.1f} | {med(c[1] for c in costs):.1f} | "
              f"{med(samp_vec):.1f} | {med(samp_one):.1f} |", flush=True)
    codec = [codec_costs("Pendulum-v1", 21, a.calls) for _ in range(a.repeats)]
    codec_row = {"env_id": "Pendulum-v1", "action_bins": 21, "own_action_us": statistics.median(c[0] for c in codec),
                 "token_us": statistics.median(c[1] for c in codec)}
    print(f"\nPendulum-v1 step: {codec_row['own_action_us']:.1f} us with its own action, "
          f"{codec_row['token_us']:.1f} us through the token codec")
    if a.out.name:
        settings = {"repeats": a.repeats, "calls": a.calls, "envs": a.envs, "torch_threads": 1}
        record.prepare(a.out).write_text(json.dumps({"meta": record.meta(), "settings": settings, "rows": rows,
                                                     "codec": codec_row}, indent=2))


if __name__ == "__main__":
    main()
