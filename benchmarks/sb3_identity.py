"""Stable-Baselines3's identity test over seeds: how often SB3's PPO and our GRPO clear its bar.

    python benchmarks/sb3_identity.py                  # seeds 0-19
    python benchmarks/sb3_identity.py --seeds 0-79

SB3 2.9.2's ``tests/test_identity.py::test_discrete`` trains on ``IdentityEnv(4)``,
``IdentityEnvMultiDiscrete(4)`` or ``IdentityEnvMultiBinary(4)`` (the action must repeat the
observation; the two multi-dimensional ones have 16 joint actions, rewarded only when all are right)
for 1200 env steps with ``gamma=0.4, learning_rate=0.002, n_epochs=4, n_steps=256`` and one seed (3),
then asks ``evaluate_policy`` for a mean return above 90 of 100 over 20 episodes. This runs the same
training for every seed and arm: SB3's ``PPO``; our ``GRPO`` as the test calls it; ``GRPO`` without
GiGPO's step groups at anchor states (``step_advantage_w=0``); and ``GRPO`` with the door's former
defaults for an env without an id (advantages divided by each step's pair std, no anchor steps, one
optimizer step a pass: ``batch_size=256``, the whole rollout). The other side of that choice: the
GRPO arms that differ on it, on CartPole built without a registered id (``TimeLimit(CartPoleEnv(),
500)``, so the door takes its defaults for an unknown env; anchors are void on its continuous
states), 50,000 env steps with no other argument, passed = a greedy mean return of at
least 475 over 10 episodes (its ``reward_threshold``). Writes benchmarks/results/sb3_identity/result.json;
``python benchmarks/report.py`` puts the table in docs/guides/sb3.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings
from pathlib import Path

import record  # benchmarks/record.py: default --out and the meta block

TEST = dict(gamma=0.4, learning_rate=0.002, n_epochs=4, n_steps=256)
ANCHORS_OFF = "GRPO, step_advantage_w=0"
FORMER = "GRPO, former defaults: scale_rewards=True, step_advantage_w=0, batch_size=256"
ARMS = {"PPO": None, "GRPO": {}, ANCHORS_OFF: {"step_advantage_w": 0.0},
        FORMER: {"scale_rewards": True, "step_advantage_w": 0.0, "batch_size": 256}}
IDENTITY_ENVS = ("IdentityEnv", "IdentityEnvMultiDiscrete", "IdentityEnvMultiBinary")
ENVS = (*IDENTITY_ENVS, "CartPole without an id")
THRESHOLD, TEST_SEED = 90, 3
# CartPole built without a registered id: env steps, greedy episodes, and the bar it must reach
CARTPOLE = dict(steps=50_000, eval_episodes=10, threshold=475)


def passed(env_name: str, mean_return: float) -> bool:
    """SB3's identity test asserts a mean above its bar; CartPole's threshold is reached at or above."""
    return mean_return >= CARTPOLE["threshold"] if env_name not in IDENTITY_ENVS else mean_return > THRESHOLD


def seed_list(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def one_run(arm: str, env_name: str, seed: int) -> float:
    """The test's training from ``seed`` and ``evaluate_policy``'s mean return over 20 episodes."""
    from stable_baselines3 import PPO
    from stable_baselines3.common import envs
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv

    from grpo_seq.sb3 import GRPO

    if env_name in IDENTITY_ENVS:
        env, test, steps, episodes = getattr(envs, env_name)(4), TEST, 1200, 20
    else:
        from gymnasium.envs.classic_control import CartPoleEnv
        from gymnasium.wrappers import TimeLimit

        env, test, steps, episodes = TimeLimit(CartPoleEnv(), 500), {}, CARTPOLE["steps"], CARTPOLE["eval_episodes"]
    venv = DummyVecEnv([lambda: env])
    algo, extra = (PPO, {}) if ARMS[arm] is None else (GRPO, dict(ARMS[arm]))
    if env_name not in IDENTITY_ENVS:  # no n_steps there: the former defaults had no batch_size either
        extra.pop("batch_size", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = algo("MlpPolicy", venv, seed=seed, **test, **extra).learn(steps)
        mean, _ = evaluate_policy(model, venv, n_eval_episodes=episodes, warn=False)
    return float(mean)


def arms_of(env_name: str) -> list[str]:
    """Every arm on the identity envs; on CartPole the GRPO defaults and the former ones (PPO's
    defaults there are not what this compares, and anchor states never repeat there)."""
    return [a for a in ARMS if env_name in IDENTITY_ENVS or a in ("GRPO", FORMER)]


def summarise(runs: list[dict]) -> dict:
    out: dict = {}
    for env_name in ENVS:
        for arm in ARMS:
            mine = [r for r in runs if r["env"] == env_name and r["arm"] == arm]
            if mine:
                out.setdefault(env_name, {})[arm] = {
                    "seeds": len(mine), "passed": sum(passed(env_name, r["mean_return"]) for r in mine),
                    "median": statistics.median(r["mean_return"] for r in mine),
                    "test_seed": next((r["mean_return"] for r in mine if r["seed"] == TEST_SEED), None)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0-19", help="a seed or a range lo-hi")
    ap.add_argument("--out", type=Path, default=record.default_out("sb3_identity"))
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    runs = []
    for seed in seed_list(a.seeds):
        for env_name in ENVS:
            for arm in arms_of(env_name):
                runs.append({"env": env_name, "arm": arm, "seed": seed, "mean_return": one_run(arm, env_name, seed)})
                print(json.dumps(runs[-1]), flush=True)
    result = {"meta": record.meta(), "settings": {"test": TEST, "steps": 1200, "eval_episodes": 20,
                                                  "threshold": THRESHOLD, "test_seed": TEST_SEED, "arms": ARMS,
                                                  "cartpole": CARTPOLE},
              "summary": summarise(runs), "runs": runs}
    record.prepare(a.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
