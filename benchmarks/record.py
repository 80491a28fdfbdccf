"""Where a benchmark's result goes, and the ``meta`` block that says what made it.

Every benchmark writes one current record under ``benchmarks/results/<benchmark>/``: the
result JSON (``result.json``), its plot where it has one (``result.png``), and in the JSON a
``meta`` object with the command line, the UTC date, the commit (and whether the tree had
uncommitted changes) and the machine. ``benchmarks/report.py`` builds the docs' benchmark
report from these files.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """One run of a benchmark in a process of its own: ``subprocess.run(cmd, **kwargs)`` through
    :data:`RUNNER`. A fresh interpreter, as a user's command is, so a run's seconds and memory are its
    own. The smoke tests (tests/benchmarks) put a fork of a warm process there instead: the same
    program and outputs without seconds of imports per run (timings they do not judge)."""
    return RUNNER(cmd, **kwargs)


RUNNER = subprocess.run


def default_out(benchmark: str) -> Path:
    """The record's result file, ``benchmarks/results/<benchmark>/result.json``, relative to the repo."""
    return Path("benchmarks") / "results" / benchmark / "result.json"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ('' where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine() -> dict:
    """CPU model, cores, OS, Python and torch versions of this process's machine."""
    info = {"cpu": cpu_model(), "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version()}
    try:
        import torch
        info["torch"] = torch.__version__
        if torch.cuda.is_available():  # what a --device gpu run used
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:  # pragma: no cover - every benchmark has torch
        info["torch"] = None
    return info


def meta(argv: list[str] | None = None) -> dict:
    """The ``meta`` block: command line, UTC date, commit, dirty flag and machine."""
    argv = sys.argv if argv is None else argv
    return {"command": shlex.join(["python", *argv]),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            # a copy of the tree on another machine names its commit in BENCH_COMMIT: the copy's own
            # .git (if it has one) may be older than the files beside it, so there is no dirty flag
            "commit": os.environ.get("BENCH_COMMIT") or _git("rev-parse", "HEAD") or None,
            # uncommitted changes to the code: the records' own files (a run rewrites its record as it
            # goes) are outputs, not what made them
            "dirty": None if os.environ.get("BENCH_COMMIT") else
            bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results")),
            "machine": machine()}


def prepare(out: Path) -> Path:
    """Create the folder of ``out`` and return ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return out
