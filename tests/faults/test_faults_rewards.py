"""Faults of reward functions and of the bytes a dataset holds, through the recipes' entry points:
a function that edits its arguments, exits or raises KeyboardInterrupt (in its call or at its
module's import), and a dataset file that is not UTF-8. Each misbehaviour is one line naming the
function (and its file) or the file and line, exit status 2, nothing already written changed; a
real Ctrl-C still stops as before. docs/guides/faults.md lists these cases."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from faultkit import LM_QUIET, one_error_line, tree_hashes, write_jsonl

GOOD = {"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}
OTHER = {"question": "And 4 + 4?", "answer": "#### 8"}
SCRIPT = "recipes/gsm8k_tiny.py"


def lm_argv(tiny_model: Path, dataset: Path, out: Path, *extra: str) -> list[str]:
    return [*LM_QUIET, "--model", str(tiny_model), "--dataset", str(dataset), "--output_dir", str(out), *extra]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``user_module(source)``: writes a module into tmp_path, importable; returns (name, file)."""
    made: list[str] = []
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(source: str) -> tuple[str, Path]:
        name = f"user_rewards_{tmp_path.name}_{len(made)}"
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        made.append(name)
        return name, path

    yield make
    for name in made:
        sys.modules.pop(name, None)


def line_of(path: Path, text: str) -> int:
    """The 1-based line of ``path`` holding ``text``."""
    return next(i for i, ln in enumerate(path.read_text().splitlines(), start=1) if text in ln)


# ---------------------------------------------------------------- functions that edit their arguments

EDITS = '''
    def edits(prompts, completions, answer, **kwargs):
        completions[0][0]["content"] = "EDITED"   # a chat message, in place
        completions.append([{"role": "assistant", "content": "extra"}])
        prompts.clear()
        answer[0] = "#### 999"
        return [0.0] * len(answer)

    def checks(prompts, completions, answer, **kwargs):
        intact = (len(prompts) == len(completions) == len(answer) == 2 and answer[0] == answer[1] == "2 + 3 = 5\\n#### 5"
                  and all(c[0]["content"] != "EDITED" for c in completions))
        return [1.0 if intact else -1.0] * len(completions)
'''


def test_a_reward_function_that_edits_its_arguments_does_not_change_what_the_next_scores(
        run_main, gsm8k, tiny_model, tmp_path, user_module):
    name, _ = user_module(EDITS)
    f = write_jsonl(tmp_path / "d.jsonl", [GOOD])
    out = tmp_path / "run"
    res = run_main(gsm8k, lm_argv(tiny_model, f, out, "--reward_fns", f"{name}:edits", f"{name}:checks"), script=SCRIPT)
    assert res.code == 0, res
    metrics = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["reward/checks"] == 1.0
    logged = [json.loads(ln) for ln in (out / "completions" / "step_0001.jsonl").read_text().splitlines()]
    assert len(logged) == 2 and all(r["completion"] != "EDITED" for r in logged)


# ---------------------------------------------------------------- exiting or interrupting, in the call

QUITS = '''
    import os
    import signal
    import sys

    def quits(prompts, completions, **kwargs):
        how = os.environ.get("HOW_TO_QUIT", "")
        if how == "exit3":
            sys.exit(3)
        if how == "exit0":
            sys.exit(0)
        if how == "exit_message":
            sys.exit("enough")
        if how == "keyboard":
            raise KeyboardInterrupt
        for _ in range(int(os.environ.get("CTRL_C", "0"))):  # a real Ctrl-C, as the terminal sends it
            signal.raise_signal(signal.SIGINT)
        return [1.0] * len(completions)
'''


@pytest.mark.parametrize("how, named", [
    ("exit3", "called sys.exit(3) ({file} line {line}) while scoring completions; a reward function must return "
              "scores (raise an exception to stop the run)"),
    ("exit0", "called sys.exit(0) ({file} line {line}) while scoring"),
    ("exit_message", "called sys.exit('enough') ({file} line {line}) while scoring"),
    ("keyboard", "raised KeyboardInterrupt ({file} line {line}) while scoring completions, and no Ctrl-C was pressed"),
])
def test_a_reward_function_that_exits_or_interrupts_is_named_and_nothing_written_changes(
        run_main, gsm8k, tiny_model, tmp_path, user_module, monkeypatch, how, named):
    name, path = user_module(QUITS)
    f = write_jsonl(tmp_path / "d.jsonl", [GOOD, OTHER])
    out = tmp_path / "run"
    argv = lm_argv(tiny_model, f, out, "--reward_fns", f"{name}:quits", "format")
    assert run_main(gsm8k, argv, script=SCRIPT).code == 0  # one good step, then resume into the bad one
    before = tree_hashes(out)
    monkeypatch.setenv("HOW_TO_QUIT", how)
    res = run_main(gsm8k, [*argv, "--max_steps", "2", "--resume_from", str(out)], script=SCRIPT)
    assert res.code == 2, res
    line = one_error_line(res.err)
    code_line = {"exit3": "sys.exit(3)", "exit0": "sys.exit(0)", "exit_message": "sys.exit(\"enough\")",
                 "keyboard": "raise KeyboardInterrupt"}[how]
    assert f"error: reward function 'quits' {named.format(file=path, line=line_of(path, code_line))}" in line
    after = tree_hashes(out)
    # config.json is the trainer's record of the resumed command, rewritten as any resume starts
    # (before the first step); every file the first run wrote beside it is unchanged.
    assert {k: v for k, v in after.items() if k != "config.json"} == \
        {k: v for k, v in before.items() if k != "config.json"}


def test_a_reward_function_that_exits_at_the_first_step_leaves_no_run(run_main, gsm8k, tiny_model, tmp_path,
                                                                       user_module, monkeypatch):
    name, path = user_module(QUITS)
    monkeypatch.setenv("HOW_TO_QUIT", "exit3")
    f = write_jsonl(tmp_path / "d.jsonl", [GOOD])
    out = tmp_path / "run"
    res = run_main(gsm8k, lm_argv(tiny_model, f, out, "--reward_fns", f"{name}:quits"), script=SCRIPT)
    assert res.code == 2, res
    assert "reward function 'quits' called sys.exit(3)" in one_error_line(res.err)
    # The folder holds what any run that fails in its first step leaves: its config, no step.
    assert set(tree_hashes(out)) <= {"config.json", "metrics.jsonl"}
    assert not (out / "metrics.jsonl").exists() or (out / "metrics.jsonl").read_text() == ""


def test_a_real_ctrl_c_inside_a_reward_function_still_finishes_the_step_and_checkpoints(
        run_main, gsm8k, tiny_model, tmp_path, user_module, monkeypatch):
    name, _ = user_module(QUITS)
    monkeypatch.setenv("CTRL_C", "1")
    f = write_jsonl(tmp_path / "d.jsonl", [GOOD])
    out = tmp_path / "run"
    res = run_main(gsm8k, lm_argv(tiny_model, f, out, "--reward_fns", f"{name}:quits", "--max_steps", "3"),
                   script=SCRIPT)
    assert res.code == 130, res
    assert "error:" not in res.err and "SIGINT received" in res.err
    assert (out / "checkpoints" / "step_00000001" / "manifest.json").is_file()


def test_a_real_double_ctrl_c_inside_a_reward_function_interrupts_at_once(gsm8k, tiny_model, tmp_path, user_module,
                                                                          monkeypatch):
    name, _ = user_module(QUITS)
    monkeypatch.setenv("CTRL_C", "2")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    f = write_jsonl(tmp_path / "d.jsonl", [GOOD])
    argv = lm_argv(tiny_model, f, tmp_path / "run", "--reward_fns", f"{name}:quits")
    monkeypatch.setattr(sys, "argv", [SCRIPT, *argv])
    with pytest.raises(KeyboardInterrupt):
        gsm8k(argv)


# ---------------------------------------------------------------- exiting or interrupting, at import


@pytest.mark.parametrize("body, named", [
    ("import sys\nsys.exit(3)\n", "called sys.exit(3) ({file} line 2); a module of reward functions must not exit "
                                  "when imported (put script code under if __name__ == '__main__':)"),
    # argparse exits inside argparse.py: the module's own line is the one named
    ("import argparse\np = argparse.ArgumentParser()\np.add_argument('--v', action='version', version='1')\n"
     "p.parse_args(['--v'])\n", "called sys.exit(0) ({file} line 4)"),
    ("raise KeyboardInterrupt\n", "raised KeyboardInterrupt ({file} line 1), and no Ctrl-C was pressed"),
])
def test_a_reward_module_that_exits_or_interrupts_at_import_is_named_with_its_file(
        run_main, gsm8k, tiny_model, tmp_path, user_module, body, named):
    name, path = user_module(body + "def fn(prompts, completions, **kwargs):\n    return [1.0] * len(completions)\n")
    f = write_jsonl(tmp_path / "d.jsonl", [GOOD])
    out = tmp_path / "run"
    res = run_main(gsm8k, lm_argv(tiny_model, f, out, "--reward_fns", f"{name}:fn"), script=SCRIPT)
    assert res.code == 2, res
    assert (f"error: reward function '{name}:fn': importing '{name}' {named.format(file=path)}"
            in one_error_line(res.err))
    assert not (out / "metrics.jsonl").exists()


# ---------------------------------------------------------------- bytes that are not UTF-8

LATIN1 = b'{"question": "What is 2 + 3?", "answer": "#### 5"}\n{"question": "Caf\xe9 costs 3, tea 4: total?", ' \
         b'"answer": "#### 7"}\n'


@pytest.mark.parametrize("suffix, data, where", [
    (".jsonl", LATIN1, "line 2: not UTF-8: byte 0xe9 at byte offset 68 (column 18, invalid continuation byte)"),
    (".json", b'[{"question": "ok?", "answer": "#### 1"},\n {"question": "\xff", "answer": "#### 2"}]',
     "line 2: not UTF-8: byte 0xff at byte offset 57 (column 16, invalid start byte)"),
    (".csv", b"question,answer\nok?,#### 1\nna\xefve?,#### 2\n",
     "line 3: not UTF-8: byte 0xef at byte offset 29 (column 3, invalid continuation byte)"),
])
def test_a_dataset_that_is_not_utf8_is_named_by_file_line_and_byte(run_main, gsm8k, tiny_model, tmp_path, suffix,
                                                                    data, where):
    f = tmp_path / f"d{suffix}"
    f.write_bytes(data)
    out = tmp_path / "run"
    res = run_main(gsm8k, lm_argv(tiny_model, f, out), script=SCRIPT)
    assert res.code == 2, res
    assert f"error: {f} {where}; save the file as UTF-8" in one_error_line(res.err)
    assert not out.exists()


@pytest.mark.parametrize("program", ["recipes/eval_gsm8k.py", "grpo-seq eval lm"])
def test_an_evaluation_refuses_a_dev_file_that_is_not_utf8_before_anything_is_written(run_main, tiny_model, tmp_path,
                                                                                       program):
    import eval_gsm8k

    from grpo_seq.cli.commands import main

    f = tmp_path / "dev.jsonl"
    f.write_bytes(LATIN1)
    out = tmp_path / "eval"
    common = ["--model", str(tiny_model), "--dataset", str(f), "--output_dir", str(out)]
    if program == "grpo-seq eval lm":
        res = run_main(main, ["eval", "lm", *common, "--reward_funcs", "reward_fns:format_reward"], script="grpo-seq")
    else:
        res = run_main(eval_gsm8k.cli, common, script=program)
    assert res.code == 2, res
    assert f"error: {f} line 2: not UTF-8: byte 0xe9 at byte offset 68" in one_error_line(res.err)
    assert not out.exists()
