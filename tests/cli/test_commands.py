"""The installed `grpo-seq` command, end to end on tiny settings (a separate interpreter each)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from grpo_seq.io.disk import disk_use
from tiny_lm import save_tiny_lm
import forkrun  # tests/forkrun.py: Python programs forked from a warm process

ROOT = Path(__file__).resolve().parents[2]
REWARDS = '''
def sevens(completions, **kwargs):
    return [c.count("7") / max(1, len(c)) for c in completions]


def matches(completions, answer, **kwargs):
    return [float(a in c) for c, a in zip(completions, answer)]
'''


def grpo_seq(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``grpo-seq ARGS`` run in ``cwd``, as a user runs it: grpo_seq importable, the reward module only from cwd."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    return forkrun.run([sys.executable, "-m", "grpo_seq.cli.commands", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A user's folder: a tiny model, a prompt-column dataset and a reward module beside them."""
    root = tmp_path_factory.mktemp("user")
    save_tiny_lm(root / "tiny")
    (root / "myrewards.py").write_text(REWARDS)
    (root / "data.jsonl").write_text("".join(json.dumps({"prompt": f"say {i}", "answer": str(i)}) + "\n" for i in range(4)))
    return root


def test_the_script_entry_and_every_help(work):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["grpo-seq"] == "grpo_seq.cli.commands:main" and "grpo-seq-plot" in scripts
    for command, option in [([], "train-lm"), (["train-lm"], "--reward_funcs"), (["eval", "lm"], "--reward_funcs"),
                            (["eval", "env"], "--policy"), (["plot"], "--overwrite"), (["train-env"], "--env_id"),
                            (["run"], "SPEC")]:
        res = grpo_seq([*command, "--help"], work)
        assert res.returncode == 0 and option in res.stdout, (command, res.stderr[-2000:])


def test_train_lm_then_eval_and_plot(work):
    run = work / "run"
    res = grpo_seq(["train-lm", "--model", "tiny", "--dataset", "data.jsonl", "--reward_funcs", "myrewards:sevens",
                    "myrewards.matches", "--max_steps", "2", "--max_completion_length", "6", "--output_dir", "run"], work)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "first step:" in res.stderr + res.stdout and "expect about" in res.stderr + res.stdout
    assert "peak memory" in res.stdout
    # Disk use: the printed total is every distinct file once; model/ shares the checkpoint's weights.
    use = disk_use(run)
    assert f"holds {format_total(use['total'])}" in res.stdout
    weights = (run / "model" / "model.safetensors").stat()
    assert weights.st_nlink == 2
    assert weights.st_ino == (run / "checkpoints" / "step_00000002" / "policy" / "model.safetensors").stat().st_ino
    files = {p.stat().st_ino: p.stat().st_size for p in run.rglob("*") if p.is_file()}
    assert use["total"] == sum(files.values())
    assert not any("Warning" in line for line in res.stderr.splitlines()), res.stderr[-2000:]

    res = grpo_seq(["eval", "lm", "--model", "run/model", "--dataset", "data.jsonl", "--reward_funcs", "myrewards:sevens",
                    "--max_new_tokens", "4", "--output_dir", "eval"], work)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((work / "eval" / "eval.json").read_text())
    assert result["n"] == 4 and "rewards/sevens" in result
    assert len((work / "eval" / "completions.jsonl").read_text().splitlines()) == 4
    before = (work / "eval" / "eval.json").read_text()
    again = ["eval", "lm", "--model", "run/model", "--dataset", "data.jsonl", "--reward_funcs", "myrewards:sevens",
             "--max_new_tokens", "4", "--output_dir", "eval"]
    res = grpo_seq(again, work)  # an evaluation already there is kept unless replacing it is asked for
    assert res.returncode == 2 and "holds an evaluation already" in res.stderr and "--overwrite" in res.stderr
    assert (work / "eval" / "eval.json").read_text() == before
    assert grpo_seq([*again, "--overwrite"], work).returncode == 0

    (run / "curves.png").write_bytes(b"stale")
    res = grpo_seq(["plot", "run"], work)  # the run's own curves.png is drawn again from its metrics
    assert res.returncode == 0, res.stderr[-2000:]
    assert (run / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert grpo_seq(["plot", "run", "--out", "mine.png"], work).returncode == 0 and (work / "mine.png").is_file()
    res = grpo_seq(["plot", "run", "--out", "mine.png"], work)  # any other file: replaced only when asked
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "--overwrite" in res.stderr


def test_train_lm_scores_held_out_prompts_before_and_after_and_max_steps_0_the_base_alone(work):
    common = ["--model", "tiny", "--dataset", "data.jsonl", "--reward_funcs", "myrewards.matches", "myrewards:sevens",
              "--eval_dataset", "data.jsonl", "--eval_max_new_tokens", "4", "--max_completion_length", "4"]
    # --max_minutes: whatever the machine's speed, a limit this small stops the run after its first step
    res = grpo_seq(["train-lm", *common, "--max_steps", "5", "--max_minutes", "1e-9", "--output_dir", "held"], work)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "--max_minutes 1e-09 reached after step 1 of 5: stopping" in res.stdout + res.stderr
    result = json.loads((work / "held" / "eval_heldout" / "eval.json").read_text())
    assert result["metric"] == "matches" and result["n"] == 4 and result["steps"] == 1  # the first function's score
    assert {"base", "trained", "trained_minus_base", "best_constant"} <= set(result)
    for name in ("base", "trained"):
        records = [json.loads(x) for x in (work / "held" / "eval_heldout" / f"{name}.jsonl").read_text().splitlines()]
        assert [r["answer"] for r in records] == ["0", "1", "2", "3"]
    assert res.stdout.strip().splitlines()[-1].startswith("held-out, 4 items (matches): base ")

    res = grpo_seq(["train-lm", *common, "--max_steps", "0", "--output_dir", "base"], work)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((work / "base" / "eval_heldout" / "eval.json").read_text())
    assert result["steps"] == 0 and "base" in result and "trained" not in result
    assert json.loads((work / "base" / "summary.json").read_text())["heldout"] == result
    assert not (work / "base" / "model").exists() and not (work / "base" / "checkpoints").exists()  # nothing trained

    res = grpo_seq(["train-lm", "--model", "tiny", "--dataset", "data.jsonl", "--reward_funcs", "myrewards:sevens",
                    "--max_steps", "0", "--output_dir", "none"], work)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert res.stderr.startswith("error: --max_steps: 0 scores the model on held-out items without training; give "
                                 "--eval_dataset")
    res = grpo_seq(["train-lm", *common, "--eval_metric", "nope", "--output_dir", "none"], work)
    assert res.returncode == 2 and "error: --eval_metric: no reward function 'nope'; the run's are matches, sevens" \
        in res.stderr and not (work / "none").exists()


def format_total(n: int) -> str:
    from grpo_seq.io.disk import format_bytes

    return format_bytes(n)


@pytest.mark.parametrize("args, message", [
    (["nope"], "invalid choice: 'nope'"),
    (["eval"], "required: TARGET"),
    (["train-lm", "--dataset", "data.jsonl", "--reward_funcs", "myrewards:sevens"], "--model: give a hub id"),
    (["train-lm", "--model", "tiny", "--dataset", "nothere.jsonl", "--reward_funcs", "x:y"], "nothere.jsonl: no such file"),
    (["train-lm", "--model", "tiny", "--dataset", "data.jsonl", "--reward_funcs", "elsewhere.rewards:f"],
     "run from the folder that holds elsewhere/"),
    (["train-lm", "--model", "tiny", "--dataset", "data.jsonl", "--reward_funcs", "myrewards:sevens", "--lr", "1"],
     "unknown option(s) ['--lr', '1']"),  # no abbreviations: --lr is not --learning_rate
    (["eval", "lm", "--model", "tiny", "--dataset", "data.jsonl"], "--reward_funcs: give at least one"),
    (["eval", "env", "--policy", "nothere"], "nothere"),
])
def test_every_misuse_is_one_error_line(work, args, message):
    res = grpo_seq(args, work)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], res.stderr[-2000:]


def test_ctrl_c_while_a_program_starts_is_one_line_and_status_130(monkeypatch, capsys):
    from grpo_seq.cli import commands

    def interrupted(argv):
        raise KeyboardInterrupt  # as Ctrl-C while the program imports torch or loads a model

    monkeypatch.setitem(commands.COMMANDS, "train-env", ("train", interrupted))
    with pytest.raises(SystemExit) as exit_:
        commands.main(["train-env", "--env_id", "CartPole-v1"])
    assert exit_.value.code == 130 and capsys.readouterr().err == "grpo-seq train-env: interrupted\n"


def test_the_command_starts_without_torch_or_transformers():
    code = "import sys, grpo_seq.cli.commands; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
