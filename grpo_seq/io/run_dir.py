"""A run folder belongs to one run: claimed with a lock, never taken over silently.

A training run writes ``config.json``, ``metrics.jsonl``, checkpoints and its policy into its
folder. Starting a second run there would overwrite the first one's files and interleave their
metrics, and a later resume would mix the two. So a run claims its folder
(:class:`grpo_seq.GRPOLoop` does, on the main process):

* a lock file, ``.lock``, holds the claiming process's pid and host; while that process lives,
  another run in the same folder is refused. A lock left by a process that no longer exists (a
  ``kill -9``) is stale on the same host and is taken over, with a warning; on another host
  nothing can be checked, so the message says which file to delete once that run is gone;
* a folder that already holds a run is refused unless this run resumes it, or the caller asks
  to overwrite it, in which case the message lists what is replaced.

What a run wrote is read from its own record: ``config.json``, the first file every run writes,
is its spec, and the spec's ``kind`` says which entries that kind of run writes
(:data:`WRITTEN_BY_KIND`). ``--overwrite`` deletes those and nothing else: a user's ``notes/``
or ``model/`` beside an env run stays. A folder holding files with a run's names but no
``config.json`` of a run is refused, with or without ``--overwrite``: nothing says who wrote them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

from ..errors import RunDirError

__all__ = ["RUN_FILES", "WRITTEN_BY_KIND", "LOCK_NAME", "RunLock", "foreign_run_error", "replace_run", "run_files",
           "enclosing_run", "check_not_nested",
           "written_by_run"]

logger = logging.getLogger(__name__)

LOCK_NAME = ".lock"
# What a run leaves in its folder; any of them present means the folder holds a run.
RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "checkpoints", "policy", "policy_best", "model", "completions",
             "curves.png", "agent.gif", "agent.mp4")


# What each kind of run writes at the top of its folder, by its config.json's "kind"
# (grpo_seq.jobs.env and .lm, which the Stable-Baselines3 and TRL doors run too). A config.json
# without a kind we know is a GRPOLoop's own run from Python: config.json, metrics.jsonl,
# checkpoints and, from GRPOLoop.save(), policy/.
WRITTEN_BY_KIND = {
    "env": ("config.json", "metrics.jsonl", "summary.json", "checkpoints", "policy", "policy_best", "curves.png",
            "agent.gif", "agent.mp4"),
    "lm": ("config.json", "metrics.jsonl", "summary.json", "checkpoints", "completions", "model", "curves.png"),
}
_TRAINER_WRITES = ("config.json", "metrics.jsonl", "checkpoints", "policy")


def written_by_run(folder: str | os.PathLike) -> tuple[str, ...] | None:
    """The names the run recorded in ``folder/config.json`` writes (its kind's,
    :data:`WRITTEN_BY_KIND`); None when there is no config.json holding a JSON object (no record)."""
    try:
        spec = json.loads(Path(folder, "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(spec, dict):
        return None
    kind = spec.get("kind")
    return WRITTEN_BY_KIND.get(kind, _TRAINER_WRITES) if isinstance(kind, str) else _TRAINER_WRITES


def run_files(folder: str | os.PathLike) -> list[str]:
    """The names in ``folder`` that the run recorded there wrote (:func:`written_by_run`); without
    such a record, every name a run may write (:data:`RUN_FILES`): a new run would mix with or
    replace them. Empty when there is no such folder."""
    folder = Path(folder)
    names = written_by_run(folder) or RUN_FILES
    return [name for name in RUN_FILES if name in names and (folder / name).exists()]


# What a run that stopped before its first checkpoint leaves: nothing a new run would lose.
_STARTED_ONLY = ("config.json", "metrics.jsonl", "completions", "curves.png", "checkpoints")


def stopped_before_checkpoint(folder: str | os.PathLike, found: list[str]) -> bool:
    """Whether the run files ``found`` in ``folder`` are those of a run that ended (a reward
    function that raised, a bad row) before it wrote a checkpoint or a policy: a rerun may take
    the folder over, as nothing it holds could be resumed."""
    checkpoints = Path(folder, "checkpoints")
    if written_by_run(folder) is None:  # no run's config.json: not the leftovers of one of ours
        return False
    return set(found) <= set(_STARTED_ONLY) and not (checkpoints.is_dir() and any(checkpoints.iterdir()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user: it exists
        return True
    return True


class RunLock:
    """The lock file of a run folder, created atomically (a complete file or none)."""

    def __init__(self, folder: str | os.PathLike, holder: str = "run", option: str = "--output_dir"):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.held = False
        self.holder, self.option = holder, option  # who holds such a folder, and the option that picks another

    def _holder(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}

    def acquire(self) -> "RunLock":
        """Take the lock, or raise :class:`RunDirError` naming the live run that holds it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        fd, tmp = tempfile.mkstemp(prefix=".lock.tmp-", dir=self.folder)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(me, fh)
            for _ in range(2):
                try:
                    os.link(tmp, self.path)  # atomic, and fails when the lock exists
                    self.held = True
                    return self
                except FileExistsError:
                    self._clear_stale()
        finally:
            os.unlink(tmp)
        raise RunDirError(f"{self.folder}: could not take {self.path} (another {self.holder} took it meanwhile)")

    def _clear_stale(self) -> None:
        holder = self._holder()
        if holder is None:  # released meanwhile
            return
        pid, host = holder.get("pid"), holder.get("host")
        if host == socket.gethostname() and pid == os.getpid():  # a trainer of this process before: re-enter
            self.path.unlink(missing_ok=True)
            return
        if host == socket.gethostname() and isinstance(pid, int) and not _alive(pid):
            logger.warning("%s: taking over the lock of process %d, which no longer runs", self.folder, pid)
            print(f"{self.folder}: the {self.holder} of process {pid} ended without releasing the folder; taking it "
                  "over", flush=True)
            self.path.unlink(missing_ok=True)
            return
        if host == socket.gethostname() or not holder:
            raise RunDirError(f"{self.folder} is in use by another {self.holder} (process {pid}, since "
                              f"{holder.get('since')}); wait for it to finish, or give this {self.holder} another "
                              f"{self.option}")
        raise RunDirError(f"{self.folder} is in use by a {self.holder} on {host} (process {pid}, since "
                          f"{holder.get('since')}); if that {self.holder} is gone, delete {self.path}; or give this "
                          f"{self.holder} another {self.option}")

    def release(self) -> None:
        if self.held:
            holder = self._holder()
            if holder and holder.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False


def enclosing_run(folder: str | os.PathLike) -> Path | None:
    """The nearest folder above ``folder`` that holds a run (its config.json and metrics.jsonl),
    or None."""
    path = Path(folder).expanduser().absolute()
    for parent in path.parents:
        if (parent / "config.json").is_file() and (parent / "metrics.jsonl").is_file():
            return parent
    return None


def check_not_nested(folder: str | os.PathLike, option: str = "--output_dir") -> None:
    """Refuse a run folder inside another run's: replacing or deleting the outer run (--overwrite)
    would delete this one with it, and its files would mix with the outer run's."""
    outer = enclosing_run(folder)
    if outer is not None:
        raise RunDirError(f"{option} {folder}: inside the run folder {outer} (it holds config.json and metrics.jsonl); "
                          "give a folder outside any run, such as a sibling of it")


def foreign_run_error(folder: str | os.PathLike, found: list[str]) -> RunDirError:
    """The error for a run started in a folder that holds another run (``found``: its files)."""
    if written_by_run(folder) is None:
        return _unrecorded_error(folder, found)
    return RunDirError(
        f"--output_dir {folder} already holds a run ({', '.join(found)}); resume it with --resume_from {folder}, "
        "replace it with --overwrite, or give this run another --output_dir"
    )


def _unrecorded_error(folder: str | os.PathLike, found: list[str]) -> RunDirError:
    return RunDirError(
        f"--output_dir {folder} holds {', '.join(found)} but no config.json of a run saying it wrote them, so "
        "--overwrite does not delete them (nothing was changed); move them away, or give this run another --output_dir"
    )


def replace_run(folder: str | os.PathLike, found: list[str], why: str = "--overwrite: replacing the run in") -> None:
    """Delete the entries of ``found`` in ``folder`` that the run recorded there wrote
    (:func:`written_by_run`; any other file stays), saying which and ``why``. Without such a
    record nothing is deleted: :class:`RunDirError`."""
    written = written_by_run(folder)
    if written is None:
        raise _unrecorded_error(folder, found)
    names = [name for name in found if name in written]
    print(f"{why} {folder}: {', '.join(names)}", flush=True)
    for name in sorted(names, key=lambda n: n == "config.json"):  # the record last: a stop midway keeps it
        target = Path(folder, name)
        shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
