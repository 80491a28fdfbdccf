"""Faults of the disk under a run: a full disk however the writer says so (torch.save's zip writer,
safetensors, Python), a checkpoint that would not fit, a file over the process's size limit, an
output folder that is a file or read-only. Each ends as one line with its exit status, no earlier
file changed. docs/guides/faults.md lists these cases and their outcomes."""

from __future__ import annotations

import functools
import os
import resource
import shutil
import sys
from pathlib import Path

import pytest
import torch
from faultkit import LM_QUIET, TINY, one_error_line, tree_hashes, write_jsonl
from safetensors import SafetensorError

import grpo_seq.io.serialization as ser
from grpo_seq.io.checkpoint import checkpoint_dir, list_checkpoints, verify_checkpoint
import forkrun  # tests/forkrun.py: Python programs forked from a warm process

ROOT = Path(__file__).resolve().parents[2]
# What the writers raise when the disk fills (torch 2.x's zip writer; safetensors' Rust writer).
TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
SAFETENSORS_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"
GOOD = {"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}


def kept(run_dir: Path) -> dict[str, str]:
    """The run folder's files a reader sees (hidden ones left out: the lock, unfinished writes)."""
    return {k: v for k, v in tree_hashes(run_dir).items() if not any(p.startswith(".") for p in k.split("/"))}


class FullAfter:
    """Wraps a writer: the first ``n`` calls write, later ones raise ``error`` as the disk filling
    would; the run folder is hashed at the first failure, to show the run changes nothing after."""

    def __init__(self, real, n: int, error: BaseException, run_dir: Path):
        self.real, self.n, self.error, self.run_dir, self.calls, self.at_fault = real, n, error, run_dir, 0, None

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls > self.n:
            if self.at_fault is None:
                self.at_fault = kept(self.run_dir)
            raise self.error
        return self.real(*args, **kwargs)


def assert_stopped_on_full_disk(res, run_dir: Path, first: Path, at_fault: dict, script: str) -> str:
    """Exit 1, the one line (mount point, intact checkpoint, resume command), nothing changed."""
    assert res.code == 1, res
    line = one_error_line(res.err)
    assert line.startswith("error: no space left on /") and f"(writing to {run_dir})" in line, line
    assert f"the last complete checkpoint, {first}, is intact" in line, line
    assert f"resume with: python {script}" in line and f"--resume_from {run_dir}" in line, line
    assert list_checkpoints(run_dir) == [first] and not list((run_dir / "checkpoints").glob(".*"))
    verify_checkpoint(first)
    assert kept(run_dir) == at_fault and at_fault  # nothing already written changed
    assert not (run_dir / ".lock").exists()
    return line


# -- env runs (CartPole) -----------------------------------------------------------------------------

@pytest.mark.parametrize("writer", ["torch.save", "safetensors"])
def test_a_writers_own_full_disk_error_ends_as_the_one_line_with_the_resume_command(run_main, cartpole, tmp_path,
                                                                                   monkeypatch, writer):
    run_dir = tmp_path / "run"
    if writer == "torch.save":  # the second checkpoint's optimizer.pt
        fake = FullAfter(torch.save, 1, RuntimeError(TORCH_FULL), run_dir)
        monkeypatch.setattr(torch, "save", fake)
    else:  # the second checkpoint's policy/model.safetensors
        fake = FullAfter(ser.save_file, 1, SafetensorError(SAFETENSORS_FULL), run_dir)
        monkeypatch.setattr(ser, "save_file", fake)
    res = run_main(cartpole, [*TINY, "--save_steps", "2", "--output_dir", str(run_dir)])
    assert_stopped_on_full_disk(res, run_dir, checkpoint_dir(run_dir, 2), fake.at_fault, "recipes/cartpole.py")


def fake_disk_usage(monkeypatch, run_dir: Path, free: int) -> dict:
    """``shutil.disk_usage`` saying ``free`` bytes are left on the run folder's disk once it holds
    a checkpoint (the real figures before, and elsewhere); returns where the folder is hashed."""
    real, seen = shutil.disk_usage, {}

    def disk_usage(path):
        usage = real(path)
        if Path(path).resolve().is_relative_to(run_dir.resolve()) and list_checkpoints(run_dir):
            seen.setdefault("at_fault", kept(run_dir))
            return usage._replace(free=free)
        return usage

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    return seen


def test_a_checkpoint_that_would_not_fit_is_not_started(run_main, cartpole, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    seen = fake_disk_usage(monkeypatch, run_dir, free=500)
    writes = FullAfter(torch.save, 1, AssertionError("the second checkpoint was started"), run_dir)
    monkeypatch.setattr(torch, "save", writes)
    res = run_main(cartpole, [*TINY, "--save_steps", "2", "--output_dir", str(run_dir)])
    line = assert_stopped_on_full_disk(res, run_dir, checkpoint_dir(run_dir, 2), seen["at_fault"],
                                       "recipes/cartpole.py")
    assert ": checkpoint step_00000004 needs at least " in line and ", 500 B are free;" in line, line
    assert writes.calls == 1  # only the first checkpoint's optimizer.pt was written


def test_a_file_over_the_size_limit_names_the_file_and_the_limit(tmp_path):
    # Python ignores SIGXFSZ: a write past `ulimit -f` fails with EFBIG. The checkpoint's
    # rng_state_0.json (72 KB) is its first file over 40 KB; the run's other files stay under.
    run_dir, limit = tmp_path / "run", 40_000

    # in the forked child, before the program (a partial: it is sent to the child)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    limited = functools.partial(resource.setrlimit, resource.RLIMIT_FSIZE, (limit, hard))

    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    out = forkrun.run([sys.executable, str(ROOT / "recipes" / "cartpole.py"), *TINY, "--save_steps", "2",
                          "--output_dir", str(run_dir)], capture_output=True, text=True, env=env, cwd=tmp_path,
                         preexec_fn=limited, timeout=300)
    assert out.returncode == 1, out.stderr
    line = one_error_line(out.stderr)
    assert line == (f"error: {checkpoint_dir(run_dir, 2) / 'rng_state_0.json'}: file too large: this process may "
                    f"write files of at most {limit} bytes (40.0 KB) (RLIMIT_FSIZE, ulimit -f); raise the limit "
                    "(ulimit -f unlimited) and run again"), line
    assert list_checkpoints(run_dir) == [] and not list((run_dir / "checkpoints").glob(".*"))


# -- the output folder -------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["the file", "inside the file"])
def test_an_output_dir_that_is_a_file_is_refused_before_anything_is_written(run_main, cartpole, tmp_path, where):
    f = tmp_path / "notes.txt"
    f.write_text("keep me")
    out = f if where == "the file" else f / "run"
    res = run_main(cartpole, [*TINY, "--output_dir", str(out)])
    assert res.code == 2, res
    line = one_error_line(res.err)
    assert line.startswith(f"error: --output_dir {out}: ") and "not a folder" in line, line
    assert f.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("where", ["the folder", "a new folder inside it"])
def test_a_read_only_output_dir_is_refused_before_anything_is_written(run_main, cartpole, run_copy, monkeypatch,
                                                                     where):
    import grpo_seq.io.disk as disk

    out = run_copy if where == "the folder" else run_copy / "sub"
    before = tree_hashes(run_copy)
    real_access = os.access
    if os.geteuid() == 0:  # root writes through any mode bits: the permission check is faked for it
        monkeypatch.setattr(disk.os, "access", lambda p, mode: False if Path(p) == run_copy else real_access(p, mode))
    run_copy.chmod(0o555)
    try:
        res = run_main(cartpole, [*TINY, "--overwrite", "--output_dir", str(out)])
    finally:
        run_copy.chmod(0o755)
    assert res.code == 2, res
    line = one_error_line(res.err)
    assert line.startswith(f"error: --output_dir {out}: ") and "read-only for this user" in line, line
    assert tree_hashes(run_copy) == before


# -- language-model runs (the tiny model) ----------------------------------------------------------

def lm_argv(tiny_model: Path, dataset: Path, out: Path, *extra: str) -> list[str]:
    quiet = list(LM_QUIET)
    quiet[quiet.index("--max_steps") + 1] = "2"
    return [*quiet, "--save_steps", "1", "--model", str(tiny_model), "--dataset", str(dataset),
            "--output_dir", str(out), *extra]


@pytest.mark.parametrize("writer", ["safetensors", "torch.save"])
def test_a_full_disk_in_a_language_model_run_keeps_the_checkpoint_and_resumes(run_main, gsm8k, tiny_model, tmp_path,
                                                                              monkeypatch, writer):
    import transformers.modeling_utils as mu

    run_dir, script = tmp_path / "run", "recipes/gsm8k_tiny.py"
    argv = lm_argv(tiny_model, write_jsonl(tmp_path / "d.jsonl", [GOOD, GOOD]), run_dir)
    if writer == "safetensors":  # save_pretrained's weights, in the second checkpoint's policy/
        module, name, error = mu, "safe_save_file", SafetensorError(SAFETENSORS_FULL)
    else:  # the second checkpoint's optimizer.pt
        module, name, error = torch, "save", RuntimeError(TORCH_FULL)
    fake = FullAfter(getattr(module, name), 1, error, run_dir)
    monkeypatch.setattr(module, name, fake)
    res = run_main(gsm8k, argv, script=script)
    assert_stopped_on_full_disk(res, run_dir, checkpoint_dir(run_dir, 1), fake.at_fault, script)
    monkeypatch.setattr(module, name, fake.real)  # space freed: the printed command resumes
    res = run_main(gsm8k, [*argv, "--resume_from", str(run_dir)], script=script)
    assert res.code == 0, res
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_00000001", "step_00000002"]


def test_a_language_model_checkpoint_that_would_not_fit_is_not_started(run_main, gsm8k, tiny_model, tmp_path,
                                                                      monkeypatch):
    run_dir, script = tmp_path / "run", "recipes/gsm8k_tiny.py"
    seen = fake_disk_usage(monkeypatch, run_dir, free=0)
    res = run_main(gsm8k, lm_argv(tiny_model, write_jsonl(tmp_path / "d.jsonl", [GOOD, GOOD]), run_dir), script=script)
    line = assert_stopped_on_full_disk(res, run_dir, checkpoint_dir(run_dir, 1), seen["at_fault"], script)
    assert ": checkpoint step_00000002 needs at least " in line and ", 0 B are free;" in line, line
