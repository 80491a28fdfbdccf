"""Faults in what a language-model run reads (datasets, gold answers, prompts, reward functions,
the model folder): each is refused before the first step or the first generation, as one line
naming the file and line, the row or the function. docs/guides/faults.md lists these cases."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from faultkit import LM_QUIET, one_error_line, write_jsonl

GOOD = {"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}


def lm_argv(tiny_model: Path, dataset: Path, out: Path, *extra: str) -> list[str]:
    return [*LM_QUIET, "--model", str(tiny_model), "--dataset", str(dataset), "--output_dir", str(out), *extra]


@pytest.mark.parametrize("lines, named", [
    ([], "{f}: the file is empty"),
    ([GOOD, '{"question": "1 + 1?", "answer": '], "{f} line 2: not valid JSON"),
    ([GOOD, "", '["a", "list"]'], "{f} line 3: expected a JSON object of column: value, got a list"),
    ([GOOD, {"question": "1 + 1?"}], "{f} line 2: no 'answer' column (this row has ['question'])"),
    ([GOOD, {"question": " ", "answer": "#### 1"}], "{f} line 2: empty 'question'"),
    ([GOOD, {"question": "1 + 1?", "answer": "two"}],
     "{f} line 2: reward function 'correctness_reward' cannot score this row: gold answer 'two' has no number"),
])
def test_a_bad_dataset_row_is_named_by_file_and_line_before_training(run_main, gsm8k, tiny_model, tmp_path, lines,
                                                                      named):
    f = write_jsonl(tmp_path / "d.jsonl", lines) if lines else tmp_path / "d.jsonl"
    if not lines:
        f.write_text("")
    res = run_main(gsm8k, lm_argv(tiny_model, f, tmp_path / "run"), script="recipes/gsm8k_tiny.py")
    assert res.code == 2, res
    assert named.format(f=f) in one_error_line(res.err)
    assert not (tmp_path / "run").exists()


def test_an_over_long_prompt_is_refused_before_the_first_step(run_main, gsm8k, tiny_model, tmp_path):
    # The tiny model's context is 512 tokens, a character a token.
    f = write_jsonl(tmp_path / "d.jsonl", [GOOD, GOOD, {"question": "x" * 600, "answer": "#### 1"}])
    res = run_main(gsm8k, lm_argv(tiny_model, f, tmp_path / "run"), script="recipes/gsm8k_tiny.py")
    assert res.code == 2, res
    line = one_error_line(res.err)
    assert f"{f} line 3: the prompt is" in line and "exceeds the model's context of 512" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.fixture
def user_rewards(tmp_path, monkeypatch) -> str:
    """A user's module of reward functions, importable; returns its name (unique per test)."""
    name = f"user_rewards_{tmp_path.name}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent('''
        def strict(prompts, completions):
            return [1.0] * len(completions)

        def needs_solution(prompts, completions, solution, **kwargs):
            return [1.0] * len(completions)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


@pytest.mark.parametrize("fn, named", [
    ("strict", "reward function 'strict' does not accept the keyword argument(s) 'completion_ids', 'answer'"),
    ("needs_solution", "reward function 'needs_solution' needs the argument(s) 'solution', which no dataset column"),
])
def test_a_reward_function_that_cannot_take_the_columns_is_refused_at_load(run_main, gsm8k, tiny_model, tmp_path,
                                                                          user_rewards, fn, named):
    f = write_jsonl(tmp_path / "d.jsonl", [GOOD, GOOD])
    res = run_main(gsm8k, lm_argv(tiny_model, f, tmp_path / "run", "--reward_fns", f"{user_rewards}:{fn}"),
                   script="recipes/gsm8k_tiny.py")
    assert res.code == 2, res
    assert named in one_error_line(res.err)
    assert not (tmp_path / "run").exists()


def test_a_model_folder_without_config_json_is_named(run_main, gsm8k, tmp_path):
    empty = tmp_path / "empty_model"
    empty.mkdir()
    f = write_jsonl(tmp_path / "d.jsonl", [GOOD, GOOD])
    res = run_main(gsm8k, lm_argv(empty, f, tmp_path / "run"), script="recipes/gsm8k_tiny.py")
    assert res.code == 2, res
    line = one_error_line(res.err)
    assert f"--model {empty}: the folder has no config.json" in line and "sentencepiece" not in line


def test_eval_refuses_a_non_numeric_gold_answer_before_generating(run_main, tiny_model, tmp_path, monkeypatch,
                                                                  eval_gsm8k):
    from grpo_seq.scoring import heldout

    def never(*args, **kwargs):
        raise AssertionError("generated before checking the gold answers")

    monkeypatch.setattr(heldout, "greedy_completions", never)
    f = write_jsonl(tmp_path / "dev.jsonl", [GOOD, GOOD, GOOD, {"question": "How many?", "answer": "#### many"}])
    out = tmp_path / "eval"
    res = run_main(eval_gsm8k, ["--model", str(tiny_model), "--dataset", str(f), "--output_dir", str(out)],
                   script="recipes/eval_gsm8k.py")
    assert res.code == 2, res
    assert f"{f} line 4: reward function 'correctness_reward' cannot score this row: gold answer '#### many'" in \
        one_error_line(res.err)
    assert not out.exists()


def test_eval_options_are_range_checked(run_main, tmp_path, eval_gsm8k):
    res = run_main(eval_gsm8k, ["--batch_size", "0", "--output_dir", str(tmp_path / "eval")],
                   script="recipes/eval_gsm8k.py")
    assert res.code == 2 and "--batch_size: must be >= 1, got 0" in one_error_line(res.err), res


def test_a_good_dataset_still_trains(run_main, gsm8k, tiny_model, tmp_path):
    # The checks refuse the bad, not the good: the same command on good rows runs a step.
    f = write_jsonl(tmp_path / "d.jsonl", [GOOD, {"question": "And 4 + 4?", "answer": "#### 8"}])
    res = run_main(gsm8k, lm_argv(tiny_model, f, tmp_path / "run", "--reward_fns", "format"),
                   script="recipes/gsm8k_tiny.py")
    assert res.code == 0, res
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 1
