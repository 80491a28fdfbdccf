"""Faults around a run folder, resuming, options and training (CartPole, tiny budgets): each ends
as a one-line error with its exit status, or as a correct run, and no earlier data changes.
docs/guides/faults.md lists these cases and their outcomes."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from faultkit import TINY, one_error_line, tree_hashes

from grpo_seq.io.checkpoint import list_checkpoints, verify_checkpoint
import forkrun  # tests/forkrun.py: Python programs forked from a warm process

ROOT = Path(__file__).resolve().parents[2]


# -- a run folder belongs to one run ----------------------------------------------------------------

def test_a_folder_holding_another_run_is_refused_and_kept(run_main, cartpole, run_copy):
    before = tree_hashes(run_copy)
    res = run_main(cartpole, [*TINY, "--seed", "1", "--output_dir", str(run_copy)])
    assert res.code == 2, res
    line = one_error_line(res.err)
    assert "already holds a run" in line and "--resume_from" in line and "--overwrite" in line
    assert tree_hashes(run_copy) == before


def test_a_run_inside_another_runs_folder_is_refused(run_main, cartpole, run_copy):
    before = sorted(p.name for p in run_copy.iterdir())
    res = run_main(cartpole, [*TINY, "--output_dir", str(run_copy / "checkpoints" / "inner")])
    assert res.code == 2, res
    line = one_error_line(res.err)
    assert f"inside the run folder {run_copy}" in line, line
    assert sorted(p.name for p in run_copy.iterdir()) == before and not (run_copy / "checkpoints" / "inner").exists()


def test_overwrite_says_what_it_replaces(run_main, cartpole, run_copy):
    res = run_main(cartpole, [*TINY, "--seed", "1", "--overwrite", "--output_dir", str(run_copy)])
    assert res.code == 0, res
    assert f"--overwrite: replacing the run in {run_copy}: config.json, metrics.jsonl, summary.json, checkpoints" in res.out
    assert json.loads((run_copy / "config.json").read_text())["seed"] == 1


def test_resume_with_a_larger_budget_is_allowed_and_listed(run_main, cartpole, run_copy):
    res = run_main(cartpole, [*TINY[:1], "600", *TINY[2:], "--save_steps", "2", "--resume_from", str(run_copy)])
    assert res.code == 0, res
    assert "resuming with changed options: --total_env_steps 400 -> 600" in res.out
    assert json.loads((run_copy / "summary.json").read_text())["env_steps"] in (599, 600)  # the budget, less than a step of 2 episodes short


def test_a_live_lock_refuses_a_second_run(run_main, cartpole, tmp_path):
    # The lock of a run that is still going: this test's parent process, alive, on this host.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "since": "now"}))
    before = tree_hashes(run_dir)
    res = run_main(cartpole, [*TINY, "--output_dir", str(run_dir)])
    assert res.code == 2, res
    assert f"is in use by another run (process {os.getppid()}" in one_error_line(res.err)
    assert tree_hashes(run_dir) == before


def test_a_stale_lock_of_a_dead_process_is_taken_over(run_main, cartpole, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "since": "then"}))
    res = run_main(cartpole, [*TINY, "--output_dir", str(run_dir)])
    assert res.code == 0, res
    assert f"the run of process {dead.pid} ended without releasing the folder; taking it over" in res.out
    assert (run_dir / "summary.json").is_file() and not (run_dir / ".lock").exists()


# -- resume checks compatibility --------------------------------------------------------------------

@pytest.mark.parametrize("flags, named", [
    (["--num_generations", "4"], "--num_generations was 2, is 4 now"),
    (["--hidden_sizes", "32"], "--hidden_sizes was [64, 64], is [32] now"),
    (["--learning_rate", "0.5"], "--learning_rate was 0.02, is 0.5 now"),
])
def test_resume_with_options_that_change_the_run_is_refused(run_main, cartpole, run_copy, flags, named):
    before = tree_hashes(run_copy)
    res = run_main(cartpole, [*TINY, *flags, "--resume_from", str(run_copy)])
    assert res.code == 2, res
    line = one_error_line(res.err)
    assert "the checkpoint was trained with other options" in line and named in line
    assert tree_hashes(run_copy) == before


def test_a_misspelled_resume_from_creates_nothing(run_main, cartpole, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run_main(cartpole, [*TINY, "--resume_from", "runs/cartpole_typo"])
    assert res.code == 2, res
    assert "--resume_from runs/cartpole_typo: no such checkpoint or run folder" in one_error_line(res.err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("how", ["files as a list", "no sha256"])
def test_a_malformed_manifest_falls_back_to_the_older_checkpoint(run_main, cartpole, run_copy, how):
    older, newest = list_checkpoints(run_copy)[-2:]
    manifest = json.loads((newest / "manifest.json").read_text())
    if how == "files as a list":
        manifest["files"] = list(manifest["files"])
    else:
        for meta in manifest["files"].values():
            del meta["sha256"]
    (newest / "manifest.json").write_text(json.dumps(manifest))
    res = run_main(cartpole, [*TINY[:1], "500", *TINY[2:], "--resume_from", str(run_copy)])
    assert res.code == 0, res
    assert f"refused 1 damaged checkpoint(s): checkpoint {newest}: malformed manifest.json" in res.out
    assert f"resuming from {older}" in res.out
    assert json.loads((run_copy / "summary.json").read_text())["env_steps"] in (499, 500)


# -- options range-checked where parsed -------------------------------------------------------------

@pytest.mark.parametrize("flags, named", [
    (["--adam_eps", "0"], "LoopConfig.adam_eps: must be > 0"),
    (["--max_grad_norm", "nan"], "LoopConfig.max_grad_norm: must be a finite number, got nan"),
    (["--beta", "nan"], "LoopConfig.beta: must be a finite number, got nan"),
    (["--learning_rate", "inf"], "LoopConfig.learning_rate: must be a finite number, got inf"),
    (["--solved_return", "nan"], "LoopConfig.solved_return: must be a finite number, got nan"),
    (["--eval_every", "-1"], "--eval_every: must be >= 0 (0: never evaluate), got -1"),
    (["--total_env_steps", "0"], "--total_env_steps: must be >= 1, got 0"),
    (["--eval_episodes", "0"], "--eval_episodes: must be >= 1, got 0"),
    (["--hidden_sizes", "0"], "--hidden_sizes: every width must be >= 1, got [0]"),
    (["--hidden_sizes", "64", "-3"], "--hidden_sizes: every width must be >= 1, got [64, -3]"),
    (["--obs_scale", "1", "nan", "1", "1"], "--obs_scale: every divisor must be a finite number > 0"),
    (["--torch_threads", "0"], "--torch_threads: must be >= 1, got 0"),
    # a continuous action's options, on an env whose actions are not continuous
    (["--action_bins", "5"], "--action_bins: cuts a continuous (Box) action into values; CartPole-v1's actions are "
                             "Discrete(2), got 5"),
    (["--action_clip", "-1", "1"], "--action_clip: cuts a continuous (Box) action into values; CartPole-v1's actions"),
    (["--log_std_init", "-1"], "--log_std_init: the Gaussian head's starting log std; this run's head is categorical"),
])
def test_a_bad_cartpole_option_is_one_line_and_creates_nothing(run_main, cartpole, tmp_path, flags, named):
    res = run_main(cartpole, [*TINY, *flags, "--output_dir", str(tmp_path / "run")])
    assert res.code == 2, res
    assert named in one_error_line(res.err)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flags, named", [
    (["--max_completion_length", "0"], "--max_completion_length: must be >= 1, got 0"),
    (["--generation_batch_size", "-1"], "--generation_batch_size: must be >= 0, got -1"),
    (["--max_steps", "-1"], "--max_steps: must be >= 0, got -1"),
    (["--max_steps", "0"], "--max_steps: 0 scores the model on held-out items without training; give --eval_dataset"),
    (["--top_p", "0"], "--top_p: must be in (0, 1], got 0.0"),
    (["--reward_weights", "1", "nan"], "--reward_weights: every weight must be a finite"),
])
def test_a_bad_gsm8k_option_is_one_line(run_main, gsm8k, tmp_path, flags, named):
    res = run_main(gsm8k, [*flags, "--output_dir", str(tmp_path / "run")], script="recipes/gsm8k_tiny.py")
    assert res.code == 2, res
    assert named in one_error_line(res.err)
    assert not (tmp_path / "run").exists()


def test_a_duplicate_yaml_key_is_refused_naming_its_lines(run_main, cartpole, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("seed: 1\nlearning_rate: 0.01\nseed: 2\n")
    res = run_main(cartpole, ["--config", str(cfg)])
    assert res.code == 2, res
    assert f"--config {cfg}: option 'seed' is given twice (lines 1 and 3)" in one_error_line(res.err)


def test_a_tilde_in_output_dir_is_the_home_folder(run_main, cartpole, tmp_path, monkeypatch):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir(), cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    res = run_main(cartpole, [*TINY, "--output_dir=~/x"])
    assert res.code == 0, res
    assert (home / "x" / "summary.json").is_file() and list(cwd.iterdir()) == []


# -- environments -----------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, named", [
    (["--env_id", "NoSuchEnv-v3"], "--env_id NoSuchEnv-v3: gymnasium cannot make it (NameNotFound"),
    (["--env_id", "Pendulum-v1", "--action_clip", "1", "-1"], "--action_clip: must be two finite numbers, low < high"),
    (["--env_wrappers", "no_such_pkg:Wrap"], "--env_wrappers: 'no_such_pkg:Wrap': cannot import no_such_pkg"),
])
def test_an_unknown_env_or_a_bad_action_form_is_one_line(run_main, cartpole, tmp_path, argv, named):
    res = run_main(cartpole, [*TINY, *argv, "--output_dir", str(tmp_path / "run")])
    assert res.code == 2, res
    assert named in one_error_line(res.err)
    assert not (tmp_path / "run").exists()


def test_the_script_itself_prints_one_line_for_a_continuous_action_it_cannot_cut(tmp_path):
    # The same through the interpreter, as a user runs it: one stderr line, status 2.
    res = forkrun.run([sys.executable, "recipes/cartpole.py", "--env_id", "Pendulum-v1", "--action_bins", "1"], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("error: --action_bins: must be >= 2"), res.stderr


def test_evaluating_a_missing_policy_is_one_line(run_main):
    from grpo_seq.cli.tools import eval_env as main

    res = run_main(main, ["--policy", "no/such/policy"], script="grpo_seq/scoring/evaluation.py")
    assert res.code == 2, res
    assert "no/such/policy/policy.json not found" in one_error_line(res.err)


# -- non-finite training and a full disk ------------------------------------------------------------

def test_nan_gradients_stop_the_run_with_finite_weights_saved(run_main, cartpole, tmp_path, monkeypatch):
    import grpo_seq.loop.update as update

    real_loss, calls = update.grpo_loss, {"n": 0}

    def loss_turning_nan(*args, **kwargs):  # finite for 3 updates, then NaN (e.g. a diverging model)
        loss, stats = real_loss(*args, **kwargs)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] > 3 else loss), stats

    monkeypatch.setattr(update, "grpo_loss", loss_turning_nan)
    run_dir = tmp_path / "run"
    res = run_main(cartpole, [*TINY, "--output_dir", str(run_dir)])
    assert res.code == 1, res
    line = one_error_line(res.err)
    assert "NaN or inf in 3 optimizer steps in a row" in line and "lower --learning_rate" in line
    newest = list_checkpoints(run_dir)[-1]
    verify_checkpoint(newest)
    from safetensors.torch import load_file

    weights = load_file(str(newest / "policy" / "model.safetensors"))
    assert weights and all(bool(torch.isfinite(w).all()) for w in weights.values())
    assert not (run_dir / "policy").exists() and not (run_dir / "summary.json").exists()


def test_a_full_disk_keeps_the_last_checkpoint_and_prints_the_resume_command(run_main, cartpole, tmp_path, monkeypatch):
    import grpo_seq.io.checkpoint as ckpt

    real_save, saves = torch.save, {"n": 0}

    def save_until_full(obj, f, *args, **kwargs):  # the second checkpoint's optimizer.pt hits a full disk
        saves["n"] += 1
        if saves["n"] >= 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(ckpt.torch, "save", save_until_full)
    run_dir = tmp_path / "run"
    argv = [*TINY, "--save_steps", "2", "--output_dir", str(run_dir)]
    res = run_main(cartpole, argv)
    assert res.code == 1, res
    line = one_error_line(res.err)
    first = ckpt.checkpoint_dir(run_dir, 2)
    assert "error: no space left on /" in line and f"(writing to {run_dir})" in line
    assert f"the last complete checkpoint, {first}, is intact" in line
    assert "resume with: python recipes/cartpole.py" in line and f"--resume_from {run_dir}" in line
    assert list_checkpoints(run_dir) == [first] and not list((run_dir / "checkpoints").glob(".step_*"))
    verify_checkpoint(first)
    monkeypatch.setattr(ckpt.torch, "save", real_save)  # space freed: the printed command resumes
    res = run_main(cartpole, [*argv[:-2], "--resume_from", str(run_dir)])
    assert res.code == 0, res
