"""The docs site builds in strict mode (a broken link or a missing API object fails), and its generated pages are current."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import forkrun  # tests/forkrun.py: Python programs forked from a warm process

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra: pip install -e '.[docs]'")


def run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return forkrun.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_mkdocs_build_strict(tmp_path):
    res = run("-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "api" / "objective" / "index.html").exists()
    assert (tmp_path / "site" / "results" / "cartpole_vs_sb3" / "result.png").exists()


def test_options_page_is_current():
    res = run("recipes/configs/generate.py", "--check")
    assert res.returncode == 0, res.stdout + res.stderr


def test_benchmark_report_is_current():
    res = run("benchmarks/report.py", "--check")
    assert res.returncode == 0, res.stdout + res.stderr
