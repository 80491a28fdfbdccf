"""The text-env job, its spec and its program (grpo-seq train-text-env, recipes/text_env.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from tiny_lm import save_tiny_lm

from grpo_seq.cli.commands import main
from grpo_seq.cli.programs import train_text_env
from grpo_seq.errors import ConfigError
from grpo_seq.jobs import TextEnvJob, load_spec
import forkrun  # tests/forkrun.py: Python programs forked from a warm process

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return str(save_tiny_lm(tmp_path_factory.mktemp("tiny") / "model"))


def test_train_text_env_writes_a_run_whose_spec_repeats_it(tiny_model, tmp_path):
    out = tmp_path / "run"
    summary = train_text_env(["--model", tiny_model, "--env_id", "guess_env:GuessDigit-v0", "--max_steps", "2",
                              "--max_turns", "2", "--max_completion_length", "3", "--advantage", "stepwise",
                              "--step_advantage_w", "1", "--log_completions_every", "1", "--eval_episodes", "3", "--output_dir", str(out)])
    assert summary["steps"] == 2
    heldout = json.loads((out / "eval_heldout" / "eval.json").read_text())
    assert heldout["before"]["episodes"] == heldout["after"]["episodes"] == 3 == summary["heldout"]["after"]["episodes"]
    assert len((out / "eval_heldout" / "after.jsonl").read_text().splitlines()) == 3
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "step" in r] == [1, 2]
    assert {"text_env/turns", "text_env/success_rate", "text_env/reward_turn_1", "perf/generation_seconds"} <= set(rows[-1])
    # where a step's time went: generation, environment, scoring, update; and generation's speed
    phases = ["perf/generation_seconds", "perf/env_seconds", "perf/score_seconds", "perf/backward_seconds",
              "perf/optimizer_seconds"]
    assert all(rows[-1][k] >= 0 for k in phases) and rows[-1]["perf/reply_tokens_per_second"] > 0
    assert rows[-1]["perf/generation_seconds"] + rows[-1]["perf/env_seconds"] <= rows[-1]["perf/sample_seconds"]
    assert sum(rows[-1][k] for k in phases) <= rows[-1]["perf/step_seconds"]
    episode = json.loads((out / "completions" / "step_0001.jsonl").read_text().splitlines()[0])
    roles = [(m["role"], m["trained"]) for m in episode["conversation"]]
    assert roles[0] == ("assistant", True) and all(t == (r == "assistant") for r, t in roles)
    spec = load_spec(out / "config.json")
    assert isinstance(spec, TextEnvJob) and spec.env_id == "guess_env:GuessDigit-v0" and spec.max_turns == 2
    assert spec.step_advantage_w == 1.0
    assert (out / "model" / "config.json").exists()
    # the run folder's spec repeats the run by its kind; a resume goes on from the checkpoint
    main(["run", str(out / "config.json"), "--output_dir", str(tmp_path / "again"), "--max_steps", "1"])
    assert json.loads((tmp_path / "again" / "summary.json").read_text())["steps"] == 1
    resumed = train_text_env(["--config", str(out / "config.json"), "--resume_from", str(out), "--max_steps", "3"])
    assert resumed["steps"] == 3


@pytest.mark.parametrize("argv, message", [
    (["--env_id", "CartPole-v1"], "error: CartPole-v1: its observation_space is Box"),
    (["--env_id", "guess_env:GuessDigit-v0", "--dataset", "x.jsonl"], "error: --dataset: a text environment's"),
    (["--env_id", "guess_env:GuessDigit-v0", "--max_turns", "0"], "error: --max_turns: must be >= 1, got 0"),
    (["--env_id", "guess_env:GuessDigit-v0", "--env_kwargs", "[1]"], "error: --env_kwargs: must be a JSON object"),
])
def test_bad_input_is_one_error_line_and_exit_2(tiny_model, tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        train_text_env(["--model", tiny_model, "--output_dir", str(out), *argv])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith(message) and "\n" not in err
    assert not out.exists() or not any(out.iterdir())


def test_the_spec_refuses_reward_functions():
    with pytest.raises(ConfigError, match="--reward_fns: a text environment's rewards come from the environment"):
        TextEnvJob(env_id="X-v0", reward_fns=["m:f"])


def test_the_recipe_trains_an_env_from_the_users_own_module(tiny_model, tmp_path):
    # run from the folder holding guess_env.py, as a user runs it beside their module
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    out = forkrun.run([sys.executable, str(ROOT / "recipes" / "text_env.py"), "--model", tiny_model, "--env_id",
                          "guess_env:GuessDigit-v0", "--max_steps", "1", "--system_prompt", "", "--eval_episodes", "2", "--output_dir",
                          str(tmp_path / "run")], cwd=HERE, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 1


def test_the_command_lists_the_text_env_options(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train-text-env", "--help"])
    shown = capsys.readouterr().out
    assert e.value.code == 0
    assert all(f"--{name}" in shown for name in ("env_id", "max_turns", "max_total_tokens", "num_generations"))
