"""A run folder belongs to one run: the lock, stale locks, and the run files."""

import json
import os
import socket
import subprocess
import sys

import pytest

from grpo_seq.errors import RunDirError
from grpo_seq.io.run_dir import LOCK_NAME, RunLock, replace_run, run_files


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # exited and reaped: no such process now


def write_lock(folder, pid, host=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(), "since": "then"}))


def test_lock_holds_pid_and_host_and_is_released(tmp_path):
    lock = RunLock(tmp_path / "run").acquire()
    holder = json.loads((tmp_path / "run" / LOCK_NAME).read_text())
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    lock.release()
    assert not (tmp_path / "run" / LOCK_NAME).exists()


def test_a_live_holder_is_refused_by_pid(tmp_path):
    write_lock(tmp_path, os.getppid())  # the parent process: alive
    with pytest.raises(RunDirError, match=rf"in use by another run \(process {os.getppid()},"):
        RunLock(tmp_path).acquire()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getppid()  # untouched


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path, capsys):
    pid = dead_pid()
    write_lock(tmp_path, pid)
    RunLock(tmp_path).acquire()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert f"process {pid}" in capsys.readouterr().out


def test_a_lock_from_another_host_names_the_file_to_delete(tmp_path):
    write_lock(tmp_path, 1, host="elsewhere")
    with pytest.raises(RunDirError, match=rf"on elsewhere .* delete {tmp_path / LOCK_NAME}"):
        RunLock(tmp_path).acquire()


def test_run_files_and_replace_run(tmp_path, capsys):
    assert run_files(tmp_path / "none") == []
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "checkpoints" / "step_1").mkdir(parents=True)
    (tmp_path / "notes.txt").write_text("mine")
    assert run_files(tmp_path) == ["config.json", "checkpoints"]
    replace_run(tmp_path, run_files(tmp_path))
    assert "replacing the run" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # the user's own file stays
