"""Helpers of the fault suite: run an entry point in this process (fast: no interpreter start),
read its exit status and output, and hash a run folder before and after."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
for extra in (ROOT / "tests", ROOT / "recipes", ROOT):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from faultkit import TINY, Result  # noqa: E402


def recipe(name: str):
    """The recipe module ``recipes/<name>.py``, by its path: importing ``reasoning_gym`` elsewhere in
    this process runs recipes/reasoning_gym.py, which takes recipes/ off sys.path (it has the
    package's name)."""
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def run_main(capsys, monkeypatch) -> Callable[..., Result]:
    """``run_main(fn, argv, script=...)``: call an entry point with ``argv`` as its command line
    (``sys.argv`` too, for the resume command it prints); returns its exit status and output."""
    monkeypatch.setenv("TQDM_DISABLE", "1")

    def run(fn: Callable, argv: list[str], script: str = "recipes/cartpole.py") -> Result:
        monkeypatch.setattr(sys, "argv", [script, *argv])
        capsys.readouterr()
        try:
            fn(argv)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


@pytest.fixture
def cartpole():
    return recipe("cartpole").train_env


@pytest.fixture
def gsm8k():
    return recipe("gsm8k_tiny").cli


@pytest.fixture
def eval_gsm8k():
    return recipe("eval_gsm8k").cli


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from tiny_lm import save_tiny_lm

    return save_tiny_lm(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A finished CartPole run (seed 0) with two checkpoints, made once; tests copy it."""
    cartpole = recipe("cartpole")
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    os.environ["TQDM_DISABLE"] = "1"
    argv = [*TINY, "--seed", "0", "--save_steps", "2", "--output_dir", str(run_dir)]
    saved = sys.argv
    sys.argv = ["recipes/cartpole.py", *argv]
    try:
        cartpole.train_env(argv)
    finally:
        sys.argv = saved
    assert (run_dir / "summary.json").is_file()
    return run_dir


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    """A fresh copy of :func:`finished_run` to damage or reuse."""
    target = tmp_path / "run"
    shutil.copytree(finished_run, target)
    return target
