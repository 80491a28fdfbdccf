"""Faults around an evaluation's folder (recipes/eval_gsm8k.py, ``grpo-seq eval lm``): an
evaluation owns its folder as a training run does. A folder holding an evaluation is refused
without ``--overwrite``, with one line naming the folder and the way out, and nothing in it
changes; ``--overwrite`` replaces only what an evaluation writes; the default folder is new for
each evaluation. Generation is stubbed where it would only cost time (the model is a tiny one)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from faultkit import one_error_line, tree_hashes, write_jsonl

GOOD = {"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}
FAST = ["--limit", "2", "--max_new_tokens", "2", "--batch_size", "2", "--torch_threads", "1"]


@pytest.fixture
def stub_generation(monkeypatch):
    """Greedy "completions" without generating: each prompt answered "#### 5"."""
    from grpo_seq.scoring import heldout

    monkeypatch.setattr(heldout, "greedy_completions", lambda model, tok, prompts, *a, **k: ["#### 5"] * len(prompts))


@pytest.fixture
def dev(tmp_path) -> Path:
    return write_jsonl(tmp_path / "dev.jsonl", [GOOD, GOOD])


def an_evaluation(folder: Path) -> Path:
    """A folder holding an earlier evaluation's results, and a file of the user's beside them."""
    folder.mkdir(parents=True)
    (folder / "eval.json").write_text(json.dumps({"accuracy": 0.5, "n": 2}))
    (folder / "completions.jsonl").write_text('{"completion": "old"}\n')
    (folder / "notes.txt").write_text("mine")
    return folder


def test_a_folder_holding_an_evaluation_is_refused_and_kept(run_main, eval_gsm8k, tmp_path, dev):
    out = an_evaluation(tmp_path / "eval")
    before = tree_hashes(out)
    res = run_main(eval_gsm8k, ["--dataset", str(dev), "--output_dir", str(out)], script="recipes/eval_gsm8k.py")
    assert res.code == 2, res
    assert one_error_line(res.err) == (f"error: --output_dir {out} holds an evaluation already (eval.json, "
                                       "completions.jsonl); give another --output_dir, or --overwrite to replace it")
    assert tree_hashes(out) == before


def test_half_an_evaluation_is_refused_too(run_main, tmp_path, dev):
    # completions.jsonl is written first: alone, it is an evaluation stopped before its eval.json
    from grpo_seq.cli.tools import eval_lm

    out = tmp_path / "eval"
    out.mkdir()
    (out / "completions.jsonl").write_text("{}\n")
    res = run_main(eval_lm, ["--model", "tiny", "--dataset", str(dev), "--reward_funcs", "m:f", "--output_dir", str(out)],
                   script="grpo-seq")
    assert res.code == 2, res
    assert f"--output_dir {out} holds an evaluation already (completions.jsonl)" in one_error_line(res.err)


def test_overwrite_replaces_only_the_evaluation(run_main, eval_gsm8k, tiny_model, tmp_path, dev, stub_generation):
    out = an_evaluation(tmp_path / "eval")
    notes = tree_hashes(out)["notes.txt"]
    res = run_main(eval_gsm8k, ["--model", str(tiny_model), "--dataset", str(dev), "--output_dir", str(out),
                                "--overwrite", *FAST], script="recipes/eval_gsm8k.py")
    assert res.code == 0, res
    assert f"--overwrite: replacing the evaluation in {out}: eval.json, completions.jsonl (once this one is written)" \
        in res.out
    result = json.loads((out / "eval.json").read_text())
    assert result["n"] == 2 and result["accuracy"] == 1.0 and result["output_dir"] == str(out)
    assert len((out / "completions.jsonl").read_text().splitlines()) == 2
    assert tree_hashes(out)["notes.txt"] == notes and sorted(p.name for p in out.iterdir()) == [
        "completions.jsonl", "eval.json", "notes.txt"]  # the user's file kept; the lock released


def test_the_default_folder_is_new_for_each_evaluation(run_main, eval_gsm8k, tiny_model, tmp_path, dev,
                                                       stub_generation, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["--model", str(tiny_model), "--dataset", str(dev), *FAST]
    first = run_main(eval_gsm8k, argv, script="recipes/eval_gsm8k.py")
    assert first.code == 0, first
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("eval_gsm8k__")
    first_folder, before = folders[0], tree_hashes(folders[0])
    second = run_main(eval_gsm8k, argv, script="recipes/eval_gsm8k.py")
    assert second.code == 0, second
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2 and all((f / "eval.json").is_file() for f in folders)
    assert tree_hashes(first_folder) == before  # the first evaluation untouched
    (new,) = [f for f in folders if f != first_folder]
    assert json.loads(second.out.splitlines()[-1])["output_dir"] == str(Path("runs", new.name))


def test_default_folders_taken_in_the_same_second_are_numbered(tmp_path, monkeypatch):
    from grpo_seq.jobs import eval_lm

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(eval_lm.time, "time", lambda: 1700000000.5)
    (tmp_path / "runs" / "eval_lm__1700000000").mkdir(parents=True)
    (tmp_path / "runs" / "eval_lm__1700000000_2").mkdir()
    cfg = eval_lm.EvalLMConfig(model="m", dataset="d.jsonl")
    assert eval_lm.eval_folder(cfg) == Path("runs/eval_lm__1700000000_3")
    assert cfg.output_dir == str(Path("runs/eval_lm__1700000000_3"))
    assert not Path(cfg.output_dir).exists()  # chosen, not made: a refused evaluation creates nothing


def test_a_folder_in_use_by_a_live_run_is_refused(run_main, eval_gsm8k, tiny_model, tmp_path, dev, stub_generation):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "since": "now"}))
    before = tree_hashes(out)
    res = run_main(eval_gsm8k, ["--model", str(tiny_model), "--dataset", str(dev), "--output_dir", str(out), *FAST],
                   script="recipes/eval_gsm8k.py")
    assert res.code == 2, res
    assert f"{out} is in use by another run (process {os.getppid()}" in one_error_line(res.err)
    assert tree_hashes(out) == before


def test_an_output_dir_that_is_a_file_is_refused_before_loading(run_main, eval_gsm8k, tmp_path, dev):
    out = tmp_path / "eval"
    out.write_text("a file")
    res = run_main(eval_gsm8k, ["--dataset", str(dev), "--output_dir", str(out)], script="recipes/eval_gsm8k.py")
    assert res.code == 2, res
    assert f"--output_dir {out}: is a file, not a folder" in one_error_line(res.err)
    assert out.read_text() == "a file"


def test_a_failed_evaluation_leaves_no_empty_folder(eval_gsm8k, tiny_model, tmp_path, dev, monkeypatch):
    from grpo_seq.scoring import heldout

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in generation")

    monkeypatch.setattr(heldout, "greedy_completions", broken)
    out = tmp_path / "eval"
    with pytest.raises(RuntimeError, match="a bug in generation"):  # a bug keeps its traceback
        eval_gsm8k(["--model", str(tiny_model), "--dataset", str(dev), "--output_dir", str(out), *FAST])
    assert not out.exists()
