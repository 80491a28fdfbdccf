"""What a minibatch of env steps costs to train: one-step outputs against every episode under a mask.

    python benchmarks/minibatch_cost.py --steps 12

With ``minibatch_tokens`` an update draws its env steps at random from every episode of the batch,
as PPO's ``batch_size`` does. A policy that scores each step from its own observation
(``CategoricalMLPPolicy.scores_steps_independently``) is given those steps as one-step outputs
(``RolloutBatch.steps``); any other policy runs every episode forward under a mask holding the
minibatch's steps, the whole batch once per minibatch. Both give the same loss
(``tests/test_token_minibatches.py``).

For each setting, two trainers alike but for that (the same seed, so the same rollouts and
updates up to float rounding) take ``--steps`` steps, alternating which goes first. Per step:
the seconds of its forward/backward passes and optimizer steps (``perf/backward_seconds`` +
``perf/optimizer_seconds``) and of the whole step; medians over the steps after the first, and
one-step / masked. One torch thread, an untrained policy: Acrobot's episodes run to the 500-step
limit, told apart by the env job's tie-breaking bonus (``NoveltyBonus``, scale 0.01), as in a run's
first updates.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)
from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, LoopConfig, GRPOLoop  # noqa: E402
from grpo_seq.envs.obs_scale import rollout_obs_scale  # noqa: E402
from grpo_seq.sampling.novelty import NoveltyBonus  # noqa: E402

# name -> (env, trainer options): the Acrobot defaults' minibatches, and PPO's own shape
# (rl-zoo3's batch_size 64, 10 epochs over a rollout) as the SB3 door maps batch_size.
SETTINGS = {
    "Acrobot defaults (G 8, 1,024 steps a minibatch)": ("Acrobot-v1", dict(num_groups=1, num_generations=8,
                                                                           minibatch_tokens=1024)),
    "PPO-shaped (Acrobot, 4 passes, 64 steps a minibatch)": ("Acrobot-v1", dict(num_groups=1, num_generations=4,
                                                                                mu=4, minibatch_tokens=64)),
    "PPO-shaped (CartPole, 16 pairs, 10 passes, 64 steps a minibatch)": ("CartPole-v1", dict(
        num_groups=16, num_generations=2, mu=10, minibatch_tokens=64)),
}


class MaskedScoring(CategoricalMLPPolicy):
    """The same MLP, scored as a sequence policy is: every episode forward under a mask."""

    scores_steps_independently = False


def trainer(env_id: str, options: dict, masked: bool, seed: int) -> GRPOLoop:
    cfg = LoopConfig(learning_rate=1e-3, beta=0.0, advantage="stepwise", gamma=0.99, loss_type="bnpo", seed=seed,
                     **options)
    scale = rollout_obs_scale(env_id, seed=seed)
    bonus = NoveltyBonus(0.01, scale, 20) if env_id != "CartPole-v1" else None
    sampler = EnvGroupSampler(env_id, cfg.num_groups, cfg.num_generations, seed=seed, bonus=bonus)
    torch.manual_seed(seed)
    cls = MaskedScoring if masked else CategoricalMLPPolicy
    return GRPOLoop(cfg, cls(sampler.obs_dim, sampler.num_actions), sampler, Accelerator(cpu=True))


def measure(env_id: str, options: dict, steps: int, seed: int) -> dict:
    runs = {"one-step": trainer(env_id, options, False, seed), "masked": trainer(env_id, options, True, seed)}
    seen: dict[str, list[dict]] = {k: [] for k in runs}
    for i in range(steps):
        for name in (list(runs) if i % 2 == 0 else list(runs)[::-1]):
            m = runs[name].step()
            seen[name].append({"train": m["perf/backward_seconds"] + m["perf/optimizer_seconds"],
                               "step": m["perf/step_seconds"], "tokens": m["policy/completion_length"],
                               "optimizer_steps": m["perf/optimizer_steps"]})
    med = statistics.median
    out = {name: {k: med(r[k] for r in rows[1:]) for k in ("train", "step", "tokens", "optimizer_steps")}
           for name, rows in seen.items()}
    out["train_ratio"] = out["one-step"]["train"] / out["masked"]["train"]
    out["step_ratio"] = out["one-step"]["step"] / out["masked"]["step"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12, help="steps per trainer and setting (the first is not counted)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=record.default_out("minibatch_cost"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    print("| setting | optimizer steps a step | train s, one-step | train s, masked | one-step / masked | "
          "step, one-step / masked |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (env_id, options) in SETTINGS.items():
        r = measure(env_id, options, a.steps, a.seed)
        rows.append({"setting": name, "env_id": env_id, "options": options, **r})
        print(f"| {name} | {r['one-step']['optimizer_steps']:.0f} | {r['one-step']['train']:.3f} | "
              f"{r['masked']['train']:.3f} | {r['train_ratio']:.2f} | {r['step_ratio']:.2f} |", flush=True)
    settings = {"steps": a.steps, "seed": a.seed, "torch_threads": 1, "learning_rate": 1e-3, "loss_type": "bnpo"}
    record.prepare(a.out).write_text(json.dumps({"meta": record.meta(), "settings": settings, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
