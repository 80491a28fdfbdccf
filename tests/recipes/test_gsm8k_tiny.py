"""recipes/gsm8k_tiny.py and recipes/eval_gsm8k.py as a user runs them, on a tiny local model."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from reward_fns import has_answer_line
from tiny_lm import save_tiny_lm
import forkrun  # tests/forkrun.py: Python programs forked from a warm process

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "arith.jsonl"  # six hand-written problems in GSM8K's format

USER_REWARDS = '''
def text_length(completions, **kwargs):
    """Written the TRL way: conversational completions, other columns in kwargs."""
    return [float(len(c[0]["content"])) for c in completions]


def broken(completions, **kwargs):
    return [1.0] * (len(completions) - 1)
'''


def run(args, extra_path: Path | None = None):
    path = os.pathsep.join(str(p) for p in (ROOT, extra_path) if p)
    env = {**os.environ, "PYTHONPATH": path, "TQDM_DISABLE": "1"}
    return forkrun.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return save_tiny_lm(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def user_pkg(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user")
    (root / "myrewards").mkdir()
    (root / "myrewards" / "__init__.py").write_text("")
    (root / "myrewards" / "fns.py").write_text(USER_REWARDS)
    return root


def test_gsm8k_help_lists_every_option():
    out = run(["recipes/gsm8k_tiny.py", "--help"])
    assert out.returncode == 0, out.stderr
    sys.path.insert(0, str(ROOT / "recipes"))
    try:
        from gsm8k_tiny import GSM8KConfig
    finally:
        sys.path.pop(0)
    for f in dataclasses.fields(GSM8KConfig):
        assert f"--{f.name}" in out.stdout, f.name


def test_gsm8k_recipe_trains_saves_and_evaluates(tmp_path, tiny_model, user_pkg):
    run_dir = tmp_path / "run"
    res = run([
        "recipes/gsm8k_tiny.py", "--model", str(tiny_model), "--dataset", str(FIXTURE), "--max_steps", "2",
        "--max_completion_length", "12", "--use_peft", "--beta", "0.04", "--log_completions_every", "1",
        "--reward_fns", "correctness", "format", "myrewards.fns:text_length", "--reward_weights", "1", "0.5", "0.01",
        "--output_dir", str(run_dir),
    ], extra_path=user_pkg)
    assert res.returncode == 0, res.stderr[-3000:]

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in ["reward/mean", "reward/correctness_reward", "reward/format_reward", "reward/text_length",
                "policy/kl", "policy/clip_fraction", "policy/completion_length", "policy/truncated_fraction",
                "perf/tokens_per_second", "perf/peak_rss_gib"]:
        assert key in rows[0], key
    assert rows[0]["policy/kl"] == 0.0  # LoRA starts equal to its base, the reference

    # The completions table agrees with the logged rewards: the user's function, weighted sums.
    table = [json.loads(line) for line in (run_dir / "completions" / "step_0001.jsonl").read_text().splitlines()]
    assert len(table) == 8 and table[0]["prompt"] and table[1]["prompt"] is None
    lengths = [len(r["completion"]) for r in table]
    assert rows[0]["reward/text_length"] == pytest.approx(sum(lengths) / 8)
    for r in table:
        w = r["rewards"]
        assert r["reward"] == pytest.approx(w["correctness_reward"] + 0.5 * w["format_reward"] + 0.01 * w["text_length"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["completion_tokens"] == rows[-1]["perf/tokens_total"]

    # The saved (merged) model loads in the evaluation recipe.
    assert (run_dir / "model" / "adapter" / "adapter_config.json").is_file()
    res = run(["recipes/eval_gsm8k.py", "--model", str(run_dir / "model"), "--dataset", str(FIXTURE),
               "--limit", "4", "--max_new_tokens", "8", "--output_dir", str(tmp_path / "eval")])
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())
    answers = [json.loads(line) for line in (tmp_path / "eval" / "completions.jsonl").read_text().splitlines()]
    assert result["n"] == 4 == len(answers)
    assert result["accuracy"] == sum(a["correct"] for a in answers) / 4
    assert result["format_rate"] == sum(has_answer_line(a["completion"]) for a in answers) / 4
    assert result["clean_format_rate"] == sum(a["format_reward"] == 1.0 for a in answers) / 4
    assert [a["gold"] for a in answers] == ["7", "36", "1,250", "9"]


def test_gsm8k_recipe_names_a_broken_reward_function(tmp_path, tiny_model, user_pkg):
    res = run([
        "recipes/gsm8k_tiny.py", "--model", str(tiny_model), "--dataset", str(FIXTURE), "--max_steps", "1",
        "--max_completion_length", "4", "--reward_fns", "myrewards.fns:broken", "--output_dir", str(tmp_path / "r"),
    ], extra_path=user_pkg)
    assert res.returncode != 0
    assert "reward function 'broken'" in res.stderr and "expected 8" in res.stderr, res.stderr[-2000:]


def test_gsm8k_recipe_names_a_missing_column_and_a_missing_model(tmp_path, tiny_model):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n")
    res = run(["recipes/gsm8k_tiny.py", "--model", str(tiny_model), "--dataset", str(bad), "--max_steps", "1"])
    assert res.returncode != 0 and "no 'question' column" in res.stderr and str(bad) in res.stderr
    res = run(["recipes/gsm8k_tiny.py", "--model", str(tmp_path / "nope"), "--dataset", str(FIXTURE)])
    assert res.returncode != 0 and "no such folder" in res.stderr


def test_gsm8k_recipe_resumed_from_its_checkpoint_ends_like_one_run(tmp_path, tiny_model):
    # Constant learning rate: a run of 3 steps, resumed to 5, is the same run as 5 steps at once.
    common = ["recipes/gsm8k_tiny.py", "--model", str(tiny_model), "--dataset", str(FIXTURE),
              "--max_completion_length", "8", "--beta", "0.04", "--learning_rate", "1e-3", "--log_completions_every", "0"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert run([*common, "--max_steps", "5", "--output_dir", str(whole)]).returncode == 0
    res = run([*common, "--max_steps", "3", "--output_dir", str(cut)])
    assert res.returncode == 0, res.stderr[-3000:]
    res = run([*common, "--max_steps", "5", "--resume_from", str(cut)])  # the run folder: its newest checkpoint
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"resumed from {cut / 'checkpoints' / 'step_00000003'}: step 3 of 5" in res.stdout + res.stderr

    def rows(d):
        return [{k: v for k, v in json.loads(ln).items() if not k.startswith("perf/") or k == "perf/tokens_total"}
                for ln in (d / "metrics.jsonl").read_text().splitlines()]

    assert rows(cut) == rows(whole)  # six prompts, two a step: the prompt order crossed an epoch
    from safetensors.torch import load_file

    a, b = load_file(whole / "model/model.safetensors"), load_file(cut / "model/model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    summary = json.loads((cut / "summary.json").read_text())
    assert summary["steps"] == 5 and "reward_first_2_steps" in summary  # the history before the resume counts


FLAKY = '''
calls = {"n": 0}


def flaky(completions, **kwargs):
    calls["n"] += 1
    if calls["n"] == 3:
        raise RuntimeError("the judge service is down")
    return [float(len(c[0]["content"]) % 3) for c in completions]
'''


def test_an_error_mid_run_keeps_the_steps_done_in_a_checkpoint(tmp_path, tiny_model):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "judge.py").write_text(FLAKY)
    run_dir = tmp_path / "run"
    res = run(["recipes/gsm8k_tiny.py", "--model", str(tiny_model), "--dataset", str(FIXTURE), "--max_steps", "5",
               "--max_completion_length", "8", "--reward_fns", "judge:flaky", "--output_dir", str(run_dir)], extra_path=pkg)
    assert res.returncode != 0
    assert "reward function 'flaky' raised RuntimeError: the judge service is down" in res.stderr
    assert "error during step 3: the 2 steps done are saved in" in res.stderr and f"--resume_from {run_dir}" in res.stderr
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step_00000002"]
