"""Faults of options a run cannot honour (a seed numpy refuses, a thread count that crashes OpenMP,
a budget smaller than one step) and what a run folder records of its launch: each refused as one
line before anything is written, or kept to as given."""

from __future__ import annotations

import json

import pytest
from faultkit import LM_QUIET, TINY, one_error_line, tree_hashes


@pytest.mark.parametrize("flags, named", [
    (["--seed", "-1"], "LoopConfig.seed: must be in [0, 2**32 - 1], got -1"),
    (["--seed", str(2**32)], f"LoopConfig.seed: must be in [0, 2**32 - 1], got {2**32}"),
    (["--torch_threads", "100000000"], "--torch_threads: must be at most"),
    (["--total_env_steps", "1"], "--total_env_steps: must hold at least one step, which plays 2 episodes"),
])
def test_an_option_no_run_can_honour_is_one_line_and_creates_nothing(run_main, cartpole, tmp_path, flags, named):
    res = run_main(cartpole, [*TINY, *flags, "--output_dir", str(tmp_path / "run")])
    assert res.code == 2, res
    assert named in one_error_line(res.err)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flags, named", [
    (["--seed", "99999999999"], "LoopConfig.seed: must be in [0, 2**32 - 1]"),
    (["--torch_threads", "100000000"], "--torch_threads: must be at most"),
])
def test_the_same_options_of_a_language_model_run(run_main, gsm8k, tiny_model, tmp_path, flags, named):
    res = run_main(gsm8k, ["--model", str(tiny_model), *LM_QUIET, *flags, "--output_dir", str(tmp_path / "run")],
                   script="recipes/gsm8k_tiny.py")
    assert res.code == 2, res
    assert named in one_error_line(res.err)
    assert not (tmp_path / "run").exists()


def test_a_budget_smaller_than_one_steps_episodes_is_kept(run_main, cartpole, tmp_path):
    # Acrobot's episodes last up to 500 steps: one step of 2 episodes used to take ~1,000 env steps
    # whatever the budget. Now each episode is cut at what is left of it (50 steps each here).
    out = tmp_path / "run"
    res = run_main(cartpole, ["--env_id", "Acrobot-v1", "--total_env_steps", "100", "--eval_every", "0",
                              "--output_dir", str(out)])
    assert res.code == 0, res
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] == 100 and summary["iterations"] == 1


def test_config_json_records_the_launchers_mixed_precision(run_main, cartpole, tmp_path, monkeypatch):
    from accelerate.state import AcceleratorState

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # what `accelerate launch --mixed_precision bf16` sets
    AcceleratorState._reset_state(reset_partial_state=True)  # a new process would read it afresh
    out = tmp_path / "run"
    assert run_main(cartpole, [*TINY, "--output_dir", str(out)]).code == 0
    config = json.loads((out / "config.json").read_text())
    assert config["launch"] == {"mixed_precision": "bf16", "num_processes": 1, "distributed_type": "NO", "device": "cpu"}
    # the record is not an option: the file still repeats the run
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION")
    AcceleratorState._reset_state(reset_partial_state=True)
    again = tmp_path / "again"
    res = run_main(cartpole, ["--config", str(out / "config.json"), "--output_dir", str(again)])
    assert res.code == 0, res
    assert json.loads((again / "config.json").read_text())["launch"]["mixed_precision"] == "no"


@pytest.mark.parametrize("argv, named", [
    (["eval", "env", "--seed", "-5"], "--seed: must be in [0, 2**32 - 1], got -5"),
    (["eval", "env", "--episodes", str(10**14)], "--episodes: must be in [1, 100,000]"),
    (["record", "--scale", "0"], "--scale: must be in (0, 8], got 0.0"),
    (["record", "--out", "{run}/summary.json"], "summary.json exists; give another --out, or --overwrite"),
    (["record", "--out", "{run}/summary.json/agent.gif"], "which is a file, not a folder"),
])
def test_a_tool_option_no_episode_can_honour_is_one_line(run_main, run_copy, argv, named):
    from grpo_seq.cli.commands import main

    before = tree_hashes(run_copy)
    argv = [a.format(run=run_copy) for a in argv]
    res = run_main(main, [*argv[:2 if argv[0] == "eval" else 1], "--policy", str(run_copy / "policy"),
                          *argv[2 if argv[0] == "eval" else 1:]], script="grpo-seq")
    assert res.code == 2, res
    assert named in one_error_line(res.err)
    assert tree_hashes(run_copy) == before
