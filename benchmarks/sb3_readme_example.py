"""Stable-Baselines3's README example through our GRPO, over seeds: how often every greedy episode reaches 475.

    python benchmarks/sb3_readme_example.py --seeds 0-39
    python benchmarks/sb3_readme_example.py --seeds 0-39 --arm G4 --over '{"group_size": 4}'
    python benchmarks/sb3_readme_example.py --seeds 0-19 --ppo      # the reference: SB3's own PPO, arm "PPO (SB3)"

The example as SB3's README gives it for PPO, with ``GRPO`` in its place: ``CartPole-v1``,
``n_steps=256, batch_size=64, n_epochs=10, learning_rate=3e-4`` (SB3's meaning: a constant rate,
minibatches of 64 env steps, 10 passes), 20,000 env steps, one env. Each seed's trained model
then plays 5 greedy episodes (``predict(deterministic=True)``, resets seeded 1000-1004); a seed
passes when its lowest return is at least 475. ``--over`` adds GRPO options to the example's
(an arm); rows already in ``--out`` for the same arm and seed are replaced, the others kept.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import record  # benchmarks/record.py: default --out and the meta block

EXAMPLE = dict(n_steps=256, batch_size=64, n_epochs=10, learning_rate=3e-4)
STEPS, EPISODES, BAR = 20_000, 5, 475
PPO_ARM = "PPO (SB3)"


def seed_list(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def one_seed(seed: int, over: dict, steps: int = STEPS, ppo: bool = False) -> list[float]:
    """The example trained from ``seed`` (by SB3's PPO with ``ppo``); its greedy returns over
    EPISODES seeded episodes."""
    import gymnasium as gym

    if ppo:
        from stable_baselines3 import PPO as algo
    else:
        from grpo_seq import GRPO as algo

    model = algo("MlpPolicy", "CartPole-v1", **{**EXAMPLE, **over}, seed=seed, verbose=0, device="cpu")
    model.learn(total_timesteps=steps)
    env, returns = gym.make("CartPole-v1"), []
    for episode in range(EPISODES):
        obs, _ = env.reset(seed=1000 + episode)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return returns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--arm", default="the example")
    ap.add_argument("--over", default="{}", help="GRPO options added to the example's, a JSON object")
    ap.add_argument("--ppo", action="store_true", help="train SB3's PPO instead (arm 'PPO (SB3)' unless --arm names one)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=STEPS, help="env steps (the example's: 20,000)")
    ap.add_argument("--out", type=Path, default=record.default_out("sb3_readme_example"))
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    over = json.loads(a.over)
    if a.ppo and a.arm == "the example":
        a.arm = PPO_ARM
    out = record.prepare(a.out)
    d = json.loads(out.read_text()) if out.is_file() else {"rows": []}
    commit = record.meta()["commit"]  # each row's own: arms of one record may run at different commits
    for seed in seed_list(a.seeds):
        returns = one_seed(seed, over, a.steps, a.ppo)
        d["rows"] = [r for r in d["rows"] if (r["arm"], r["seed"]) != (a.arm, seed)]
        d["rows"].append({"arm": a.arm, "over": over, "seed": seed, "returns": returns, "passed": min(returns) >= BAR,
                          "commit": commit, **({"algo": "ppo"} if a.ppo else {})})
        print(json.dumps(d["rows"][-1]), flush=True)
    meta, before = record.meta(), d.get("meta", {}).get("command", [])
    d["meta"] = {**meta, "command": [c for c in before if c != meta["command"]] + [meta["command"]]}  # every arm's
    d["settings"] = {"example": EXAMPLE, "steps": a.steps, "episodes": EPISODES, "bar": BAR}
    out.write_text(json.dumps(d, indent=1))


if __name__ == "__main__":
    main()
