"""Recipes run as a user runs them: a subprocess with tiny settings."""

import json
import os
import sys
from pathlib import Path
import forkrun  # tests/forkrun.py: Python programs forked from a warm process


ROOT = Path(__file__).resolve().parents[2]


def run(args, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    return forkrun.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, **kw)


def test_cartpole_help_lists_every_option():
    out = run([sys.executable, "recipes/cartpole.py", "--help"])
    assert out.returncode == 0, out.stderr
    import dataclasses

    from grpo_seq import LoopConfig

    recipe_only = ["env_id", "total_env_steps", "eval_every", "eval_episodes", "solved_return", "hidden_sizes",
                   "obs_scale", "orthogonal_init", "keep_best"]
    for name in [f.name for f in dataclasses.fields(LoopConfig)] + recipe_only:
        assert f"--{name}" in out.stdout, name


def test_cartpole_recipe_writes_summary_metrics_and_policy(tmp_path):
    out_dir = tmp_path / "run"
    res = run([sys.executable, "recipes/cartpole.py", "--total_env_steps", "3000", "--eval_every", "1000",
               "--num_groups", "2", "--seed", "5", "--output_dir", str(out_dir)])
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out_dir / "summary.json").read_text())
    for key in ["solved", "solved_env_steps", "solved_seconds", "final_eval_return", "env_steps", "iterations", "seconds"]:
        assert key in summary, key
    assert 3000 - 4 < summary["env_steps"] <= 3000  # the budget, less than a step of 4 episodes short
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "reward/mean" in r]
    eval_rows = [r for r in rows if "eval/return" in r]
    assert len(train_rows) == summary["iterations"]
    assert train_rows[-1]["perf/tokens_total"] == summary["env_steps"]
    assert len(eval_rows) >= 3 and eval_rows[-1]["eval/return"] == summary["final_eval_return"]
    assert summary["solved"] == (summary["solved_env_steps"] is not None)
    for key in ["policy/kl", "policy/clip_fraction", "policy/entropy", "policy/completion_length",
                "reward/group_std", "perf/tokens_per_second"]:
        assert key in train_rows[0], key
    # the saved policy, loaded by the evaluation command, reproduces the final evaluation exactly
    res = run([sys.executable, "-m", "grpo_seq.cli.commands", "eval", "env", "--policy", str(out_dir / "policy"),
               "--seed", str(eval_rows[-1]["eval/seed"]), "--episodes", "10"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["mean_return"] == summary["final_eval_return"]
    assert json.loads((out_dir / "config.json").read_text())["seed"] == 5
    # policy_best/ holds the policy of the best evaluation: the first one reaching the maximum
    best = next(r for r in eval_rows if r["eval/return"] == max(e["eval/return"] for e in eval_rows))
    assert (summary["best_eval_return"], summary["best_eval_env_steps"]) == (best["eval/return"], best["perf/tokens_total"])
    res = run([sys.executable, "-m", "grpo_seq.cli.commands", "eval", "env", "--policy", summary["best_policy"],
               "--seed", str(best["eval/seed"]), "--episodes", "10"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["mean_return"] == summary["best_eval_return"]


def test_cartpole_recipe_runs_another_discrete_env(tmp_path):
    # Any discrete-action env with a flat observation goes through the same code (generic path).
    res = run([sys.executable, "recipes/cartpole.py", "--env_id", "Acrobot-v1", "--total_env_steps", "2000",
               "--eval_every", "2000", "--num_groups", "1", "--num_generations", "2", "--eval_episodes", "2",
               "--output_dir", str(tmp_path)])
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env_id"] == "Acrobot-v1" and 2000 - 2 < summary["env_steps"] <= 2000
    assert -500 <= summary["final_eval_return"] <= 0


def _metrics_without_timing(out_dir):
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def test_cartpole_recipe_same_seed_same_metrics_other_seed_differs(tmp_path):
    # --seed must reach every RNG, the policy's initial weights included.
    flags = ["--total_env_steps", "1500", "--eval_every", "500", "--num_groups", "2"]
    for name, seed in [("a", 7), ("b", 7), ("c", 8)]:
        res = run([sys.executable, "recipes/cartpole.py", *flags, "--seed", str(seed), "--output_dir", str(tmp_path / name)])
        assert res.returncode == 0, res.stderr[-3000:]
    a, b, c = (_metrics_without_timing(tmp_path / n) for n in "abc")
    assert a == b
    assert a[0] != c[0]


def test_options_left_unset_take_the_envs_own_defaults_and_a_given_flag_wins():
    from grpo_seq.cli import parse_config
    from grpo_seq.jobs.env_spec import EnvJob

    def algo(argv):
        c = parse_config(EnvJob, argv)
        return c.scale_rewards, c.adam_beta2, c.learning_rate, c.advantage, c.num_generations

    # MountainCar: centred step-wise advantages, Adam 1e-2 with beta2 0.999 (questions mountaincar_defaults
    # and mountaincar_first_push of benchmarks/results/env_sweep/result.json)
    assert algo(["--env_id", "MountainCar-v0"]) == ("none", 0.999, 1e-2, "stepwise", 8)
    assert algo(["--env_id", "MountainCar-v0", "--scale_rewards", "true", "--adam_beta2", "0.9"])[:2] == ("group", 0.9)
    assert algo(["--env_id", "MountainCar-v0", "--scale_rewards", "batch"])[:2] == ("batch", 0.999)
    # CartPole and the rest keep std-scaled advantages and beta2 0.95
    assert algo(["--env_id", "CartPole-v1"]) == ("group", 0.95, 2e-2, "stepwise", 2)
    assert algo(["--env_id", "Acrobot-v1"]) == ("group", 0.95, 5e-3, "stepwise", 8)
    # ended members stay in the step-wise comparison everywhere but CartPole (question lunarlander_defaults)
    absorb = lambda argv: parse_config(EnvJob, argv).absorb_ended  # noqa: E731
    assert (absorb(["--env_id", "CartPole-v1"]), absorb(["--env_id", "LunarLander-v3"])) == (False, True)
    assert absorb(["--env_id", "CartPole-v1", "--absorb_ended"]) is True
    assert absorb(["--env_id", "Acrobot-v1", "--absorb_ended", "false"]) is False
    # centred observations and an entropy bonus for MountainCar only (question mountaincar_first_push)
    first_push = lambda argv: (lambda c: (c.obs_center, c.ent_coef))(parse_config(EnvJob, argv))  # noqa: E731
    assert first_push(["--env_id", "MountainCar-v0"]) == (True, 0.01)
    assert first_push(["--env_id", "Acrobot-v1"]) == first_push(["--env_id", "CartPole-v1"]) == (False, 0.0)
    assert first_push(["--env_id", "MountainCar-v0", "--obs_center", "false", "--ent_coef", "0"]) == (False, 0.0)
    assert first_push(["--env_id", "Acrobot-v1", "--obs_center"]) == (True, 0.0)
