"""The service's jobs: each in a process of its own (:mod:`.worker`), forked from a fork server
that imported the training code once, and watched by a thread that records how it ended. A record's state is one of queued (its process is starting), running,
done, failed (with the error line and the newest checkpoint) and cancelled."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ..jobs.folder import checkpoints as list_checkpoints
from ..jobs.spec import save_spec, spec_to_dict
from .requests import RequestError
from .store import Store
from .worker import run

__all__ = ["JobManager", "ACTIVE"]

ACTIVE = ("queued", "running")
# imported once by the fork server that every job's process is forked from, so that a job starts at
# once instead of after seconds of imports: env jobs (and their plot at the end), and language-model
# and agent jobs (transformers and its Llama model class, which many small models use, accelerate,
# peft, datasets, the OpenAI client). The server holds these modules in memory (a few hundred MiB,
# shared with its jobs).
PRELOAD = ["grpo_seq.serve.worker", "grpo_seq.jobs.env", "matplotlib.pyplot", "grpo_seq.jobs.lm", "grpo_seq.jobs.agent",
           "transformers", "transformers.models.llama.modeling_llama", "accelerate", "peft", "datasets", "openai"]
_CONTEXT = multiprocessing.get_context("forkserver")


def warm_up() -> None:
    """Start the fork server and its imports now, so that the first job starts at once too."""
    _CONTEXT.set_forkserver_preload(PRELOAD)
    from multiprocessing import forkserver

    forkserver.ensure_running()


def stop_fork_server(server: Any = None) -> None:
    """End the fork server (``server``, default multiprocessing's own) with the service. Left alone,
    it would go on with its imports (seconds) after the service exits, an orphan holding the
    service's stdout open. Its jobs are stopped first (:meth:`JobManager.close`); it keeps no state
    of its own. Killed, then stopped as multiprocessing stops it (its pipe closed, the process
    reaped, its socket removed), so that a later job in this process starts a new one."""
    from multiprocessing import forkserver

    server = server or forkserver._forkserver  # multiprocessing has no public handle
    pid = getattr(server, "_forkserver_pid", None)
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server._stop()


def _error_line(log: Path) -> str:
    """The job's ``error: ...`` line, else the last line it wrote (a traceback's last line)."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.startswith("error:")]
    return (errors or lines or [""])[-1][:1000]


def _ended(code: int, cancel: bool) -> tuple[str, str]:
    """The state and reason of a job whose process exited with ``code``."""
    if code == 0:
        return "done", ""
    if cancel:
        return "cancelled", "cancelled (DELETE /jobs/{id})"
    if code < 0:
        return "failed", f"the job's process was killed by {signal.Signals(-code).name}"
    if code == 128 + signal.SIGTERM:
        return "failed", "the job's process was stopped by SIGTERM"
    return "failed", f"the job's process exited with status {code}"


class JobManager:
    """Starts, watches, cancels and resumes jobs; ``on_done(record)`` registers a finished job's model."""

    def __init__(self, store: Store, max_jobs: int, on_done: Any = None):
        self.store, self.max_jobs, self.on_done = store, max_jobs, on_done
        self.lock = threading.Lock()
        self.procs: dict[str, Any] = {}  # job id -> (its multiprocessing.Process, the write end of its pipe)
        self._recover()
        threading.Thread(target=warm_up, daemon=True, name="fork-server").start()

    def _recover(self) -> None:
        """Jobs the last service left queued or running died with it: failed, their checkpoint named."""
        for record in self.store.jobs():
            if record.get("state") in ACTIVE:
                record.update(state="failed", ended=time.time(),
                              error=f"the service stopped while this job ran (pid {record.get('pid')})")
                self.store.write_job(record)

    def active(self) -> int:
        return sum(1 for r in self.store.jobs() if r.get("state") in ACTIVE)

    def start(self, spec: Any, model_name: str | None, record: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write the job's spec and record, start its process; returns the record."""
        if record is None:
            job_id = uuid.uuid4().hex[:12]
            record = {"id": job_id, "kind": spec.KIND, "model_name": model_name or job_id, "created": time.time(),
                      "resumes": 0}
        job_dir = self.store.job_dir(record["id"])
        fresh = not job_dir.exists()
        try:
            job_dir.mkdir(parents=True, exist_ok=True)
            if record.get("resumes", 0) == 0:
                spec.output_dir = str(self.store.run_dir(record["id"]))
            save_spec(spec, job_dir / "spec.json")
            (job_dir / "progress.json").unlink(missing_ok=True)
        except OSError as e:  # a full disk, a read-only store: no job, and no empty folder of one left
            if fresh:
                shutil.rmtree(job_dir, ignore_errors=True)
            raise RequestError(507, f"the store ({self.store.root}) cannot hold a new job: {e.strerror or e}; "
                               "free space there and ask again") from None
        record.update(state="queued", spec=spec_to_dict(spec), error=None, exit_code=None, ended=None,
                      started=time.time(), cancel=False)
        with self.lock:
            _CONTEXT.set_forkserver_preload(PRELOAD)
            alive_read, alive_write = _CONTEXT.Pipe(duplex=False)
            proc = _CONTEXT.Process(target=run, args=(str(job_dir), alive_read), name=f"job-{record['id']}")
            proc.start()
            alive_read.close()
            record["pid"] = proc.pid
            self.procs[record["id"]] = (proc, alive_write)
            self.store.write_job(record)
        threading.Thread(target=self._watch, args=(record["id"], proc), daemon=True).start()
        return record

    def _watch(self, job_id: str, proc: Any) -> None:
        proc.join()
        code = proc.exitcode
        with self.lock:
            record = self.store.read_job(job_id) or {"id": job_id}
            state, reason = _ended(code, bool(record.get("cancel")))
            if state == "failed":
                line = _error_line(self.store.job_dir(job_id) / "log.txt")
                reason = line if line.startswith("error:") else f"{reason}: {line}" if line else reason
            record.update(state=state, exit_code=code, ended=time.time(), error=reason or None)
            if state == "done" and self.on_done is not None:
                try:  # the model is registered before the job reads as done
                    self.on_done(record)
                except (OSError, ValueError, KeyError) as e:
                    record.update(state="failed", error=f"the job ended, but its model could not be registered ({e})")
            _, alive = self.procs.pop(job_id, (None, None))
            if alive is not None:
                alive.close()
            self.store.write_job(record)

    def view(self, record: dict[str, Any]) -> dict[str, Any]:
        """What GET /jobs/{id} answers: the record, its progress, its newest checkpoint."""
        progress = self.store.progress(record["id"])
        state = record["state"]
        if state == "queued" and progress is not None:
            state = "running"
        checkpoints = list_checkpoints(self.store.run_dir(record["id"])) if self.store.run_dir(record["id"]).is_dir() else []
        spec = record.get("spec", {})
        return {"id": record["id"], "kind": record.get("kind"), "model_name": record.get("model_name"), "state": state,
                "env_id": spec.get("env_id"), "created": record.get("created"), "ended": record.get("ended"),
                "resumes": record.get("resumes", 0), "error": record.get("error"),
                "checkpoint": str(checkpoints[-1]) if checkpoints else None,
                "progress": {k: progress[k] for k in ("done", "total", "unit", "shown")} if progress else None,
                "metrics": (progress or {}).get("metrics"), "evaluation": (progress or {}).get("evaluation")}

    def cancel(self, job_id: str, force: bool = False) -> dict[str, Any] | None:
        """SIGTERM the job's process: it finishes its step, writes a checkpoint and exits; ``force``:
        SIGKILL it now (the step under way is lost, the checkpoints before it stay). Returns the
        record, or None when the job had ended already."""
        with self.lock:
            record = self.store.read_job(job_id)
            if record is None or record.get("state") not in ACTIVE:
                return None
            record["cancel"] = True
            self.store.write_job(record)
            proc, _ = self.procs.get(record["id"], (None, None))
            if proc is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL if force else signal.SIGTERM)
        return record

    def close(self) -> None:
        """Stop every running job (each writes its checkpoint); used when the service shuts down."""
        with self.lock:
            procs = [proc for proc, _ in self.procs.values()]
        for proc in procs:
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
        stop_fork_server()
