"""A job's own process: :func:`run` runs ``JOB_DIR/spec.json``, forked from a fork server that has
imported the training code once (a job starts in a fraction of a second, not after seconds of imports).

It writes ``JOB_DIR/progress.json`` (progress and the latest metrics, atomically, at most a few
times a second) for the service to read, and exits as the programs do: 0 when the run ended,
143 after SIGTERM once its checkpoint is written, 1 with an ``error: ...`` line on bad input.
It holds the read end of a pipe from the service: when the service dies the pipe closes, and
the job checkpoints and exits rather than train on unwatched.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..jobs import JobCallbacks, load_spec, run_job
from ..io.serialization import atomic_write_text
from .requests import finite_or_none
from .store import AGENTS

__all__ = ["ProgressFile", "run"]


class ProgressFile(JobCallbacks):
    """Keeps ``path`` holding the run's progress and latest metrics (every ``every`` seconds, and at
    the start, each evaluation and the end)."""

    def __init__(self, path: Path, every: float = 0.25):
        self.path, self.every, self._at = path, every, 0.0
        self.metrics: dict[str, Any] = {}
        self.evaluation: dict[str, Any] | None = None

    def write(self, run: Any, final: bool = False) -> None:
        p = run.progress()
        data = {"done": p.done, "total": p.total, "unit": p.unit, "shown": p.shown, "finished": final,
                "metrics": {k: finite_or_none(v) for k, v in self.metrics.items()}, "evaluation": self.evaluation}
        atomic_write_text(self.path, json.dumps(data))
        self._at = time.monotonic()

    def on_start(self, run: Any) -> None:
        self.write(run)

    def on_step(self, run: Any, metrics: dict[str, float]) -> None:
        self.metrics = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        if time.monotonic() - self._at >= self.every:
            self.write(run)

    def on_eval(self, run: Any, result: dict[str, Any]) -> None:
        self.evaluation = result
        self.write(run)

    def on_end(self, run: Any, summary: dict[str, Any]) -> None:
        self.write(run, final=True)


def _stop_when_orphaned(alive: Any) -> None:
    """SIGTERM this process once ``alive`` (the read end of a pipe whose write end the service
    holds) reports its end: the service that started the job is gone."""
    def watch() -> None:
        try:
            alive.recv()
        except (EOFError, OSError):
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="orphan-watch").start()


def run(job_dir: str, alive: Any) -> None:
    """The body of a job's process (forked from the service's preloaded fork server): output to
    ``JOB_DIR/log.txt``, the spec ``JOB_DIR/spec.json`` run in ``JOB_DIR``."""
    os.chdir(job_dir)
    log = os.open("log.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ["TQDM_DISABLE"] = "1"
    # the command a stopped run prints to resume it (the service's own argv would name the service)
    sys.argv = ["grpo-seq run", str(Path(job_dir).resolve() / "spec.json")]
    os.nice(10)  # where cores are few, the service's answers come before a job's next step
    _stop_when_orphaned(alive)
    try:
        spec = load_spec("spec.json")
        parts: dict[str, Any] = {}
        if spec.KIND == "lm":
            from reward_fns import REGISTRY

            parts = {"registry": REGISTRY, "label": "serve"}
        elif spec.KIND == "agent":  # its rollout is a module of the store's agents/ (requests.py checked it)
            sys.path.insert(0, str(Path(job_dir).resolve().parents[1] / AGENTS))
        run_job(spec, ProgressFile(Path("progress.json")), **parts)
    except UsageError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        sys.exit(1)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EFBIG):
            raise
        print(_disk_error_line(e, Path(job_dir)), file=sys.stderr, flush=True)
        sys.exit(1)


def _disk_error_line(e: OSError, job_dir: Path) -> str:
    """One line for a full disk (or a file over ``ulimit -f``): where, and how to go on: the job's
    newest complete checkpoint is intact, so the job resumes from it (``POST /jobs/{id}/resume``)."""
    from ..io.disk import mount_point
    from ..jobs.folder import checkpoints

    what = (f"no space left on {mount_point(job_dir)}" if e.errno == errno.ENOSPC
            else "a file over this process's size limit (ulimit -f)")
    found = checkpoints(job_dir / "run")
    if found:
        return (f"error: {what} (writing to {e.filename or job_dir}); the last complete checkpoint, {found[-1]}, is "
                f"intact: free some space, then resume the job (POST /jobs/{job_dir.name}/resume)")
    return f"error: {what} (writing to {e.filename or job_dir}); free some space and train again"
