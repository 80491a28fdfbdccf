"""One job, many doors: the command line, the Stable-Baselines3 class and a spec file run the same
env job, so a seed gives the same run from each; a run folder's config.json repeats its run."""

from __future__ import annotations

import json

import pytest

from grpo_seq import GRPO
from grpo_seq.cli.programs import train_env
from grpo_seq.jobs import EnvJob, load_spec, run_job, save_spec

BUDGET = ["--total_env_steps", "6000", "--eval_every", "1000", "--seed", "3"]


def _evaluations(run_dir) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["perf/tokens_total"], r["eval/return"]) for r in rows if "eval/return" in r]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    summary = train_env(["--env_id", "CartPole-v1", *BUDGET, "--output_dir", str(out)])
    return out, summary


def test_the_sb3_class_runs_the_same_job_as_the_command_line(cli_run, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    out, summary = cli_run
    model = GRPO("MlpPolicy", "CartPole-v1", seed=3, eval_every=1000).learn(total_timesteps=6000)
    assert isinstance(model.config, EnvJob) and model.config.eval_every == 1000
    state = model.run.state
    assert summary["solved_env_steps"] is not None  # the run solves within its budget, so the check below means something
    assert (state.solved_at or {}).get("env_steps") == summary["solved_env_steps"]
    assert state.last_eval == summary["final_eval_return"] and model.num_timesteps == summary["env_steps"]


def test_a_run_folders_config_json_repeats_the_run(cli_run, tmp_path):
    out, summary = cli_run
    spec = load_spec(out / "config.json")
    assert type(spec) is EnvJob
    spec.output_dir = str(tmp_path / "again")
    again = run_job(spec)
    assert again["solved_env_steps"] == summary["solved_env_steps"] and again["env_steps"] == summary["env_steps"]
    assert _evaluations(tmp_path / "again") == _evaluations(out)
    # from the command line too, with a flag overriding the file
    third = train_env(["--config", str(out / "config.json"), "--output_dir", str(tmp_path / "third")])
    assert _evaluations(tmp_path / "third") == _evaluations(out) and third["seed"] == 3


def test_a_spec_file_written_by_hand_runs_as_the_command_line_does(cli_run, tmp_path):
    out, summary = cli_run
    path = save_spec(EnvJob(env_id="CartPole-v1", total_env_steps=6000, eval_every=1000, seed=3,
                            output_dir=str(tmp_path / "spec")), tmp_path / "cartpole.yaml")
    assert run_job(load_spec(path))["solved_env_steps"] == summary["solved_env_steps"]


def test_the_sb3_class_evaluates_nothing_unless_asked(monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0).learn(total_timesteps=500)
    assert model.config.eval_every == 0 and model.run.evaluate is None and model.run.state.last_eval is None


def test_group_mode_alternatives_is_a_job_option_whose_budget_counts_env_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    out = tmp_path / "alternatives"
    summary = train_env(["--env_id", "CartPole-v1", "--group_mode", "alternatives", "--horizon", "4", "--every_action",
                         "--num_groups", "4", "--total_env_steps", "600", "--eval_every", "0", "--seed", "1",
                         "--output_dir", str(out)])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    tries = rows[-1]["perf/tokens_total"]  # one token per action tried
    # a step tries both actions at 4 states, each for up to 4 env steps, and walks one step on: at most 36
    assert 600 - 36 < summary["env_steps"] <= 600 and tries == 8 * len(rows) and summary["env_steps"] > 2 * tries
    model = GRPO("MlpPolicy", "CartPole-v1", seed=1, group_mode="alternatives", horizon=4, num_groups=4)
    model.learn(total_timesteps=600)
    assert model.config.group_mode == "alternatives" and model.config.every_action
    # as PPO, learn takes at least its total_timesteps: one step more than the job, which stays within its budget
    assert summary["env_steps"] < 600 <= model.num_timesteps <= summary["env_steps"] + 36
