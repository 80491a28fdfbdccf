"""Starting the service: ``grpo-seq serve`` and ``python -m grpo_seq.serve``, the token printed once
when none is set, and a non-loopback address refused without one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import forkrun  # tests/forkrun.py: a command that ends at once runs forked from a warm process
from conftest import ROOT, free_port, httpx, wait_for

ENV = {k: v for k, v in os.environ.items() if k != "GRPO_SEQ_API_TOKEN"}
ENV["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)


def test_a_non_loopback_address_without_a_token_is_refused_and_nothing_is_written(tmp_path):
    for command in (["-m", "grpo_seq.serve"], ["-m", "grpo_seq.cli.commands", "serve"]):
        res = forkrun.run([sys.executable, *command, "--host", "0.0.0.0", "--store", str(tmp_path / "store")],
                          env=ENV, capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and res.stderr.startswith("error: --host 0.0.0.0: listening beyond this machine "
                                                             "needs a token; set GRPO_SEQ_API_TOKEN"), res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "store").exists()
    res = forkrun.run([sys.executable, "-m", "grpo_seq.serve", "--max_jobs", "0"], env=ENV, capture_output=True,
                      text=True, timeout=120)
    assert res.returncode == 2 and "error: --max_jobs: must be >= 1, got 0" in res.stderr


def test_without_a_token_set_one_is_generated_and_printed_once(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "grpo_seq.cli.commands", "serve", "--port", str(port), "--store",
                             str(tmp_path / "store")], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("API token (send it as 'Authorization: Bearer <token>'"), first
        token = first.rsplit(": ", 1)[1].strip()
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        wait_for(lambda: _answers(client), 600, what="the service answers /health")
        assert client.get("/jobs", headers={"Authorization": f"Bearer {token}"}).json() == {"jobs": []}
        assert client.get("/jobs", headers={"Authorization": "Bearer x" + token}).status_code == 401
        # a second service on the same store would take the first one's running jobs for dead ones
        second = forkrun.run([sys.executable, "-m", "grpo_seq.serve", "--port", str(free_port()), "--store",
                              str(tmp_path / "store")], env=ENV, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert f"is in use by another service (process {proc.pid}, " in second.stderr and "--store" in second.stderr
        servers = fork_servers_of(proc.pid)
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=60)[0]
    # the fork server its jobs start from ends with it (else an orphan, still importing, holds its stdout)
    if Path("/proc/self/stat").exists():  # Linux: the processes are read from /proc
        assert servers and not [pid for pid in servers if Path(f"/proc/{pid}").exists()]
    assert token not in rest  # printed once
    assert not (tmp_path / "store" / ".lock").exists()  # released on the way out
    assert proc.returncode in (0, -15) and "Traceback" not in rest, rest  # uvicorn re-raises the SIGTERM it handled


def fork_servers_of(pid: int) -> list[int]:
    """The fork servers that process ``pid`` started (its children running multiprocessing.forkserver)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == pid and b"multiprocessing.forkserver" in (stat.parent / "cmdline").read_bytes():
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _answers(client) -> bool:
    try:
        return client.get("/health").status_code == 200
    except httpx.TransportError:
        return False


def test_a_token_that_cannot_protect_or_cannot_match_is_refused():
    import pytest

    from grpo_seq.errors import ConfigError
    from grpo_seq.serve.config import MIN_TOKEN_CHARS, resolve_token

    for token, host, message in (("a", "0.0.0.0", f"1 characters; listening beyond this machine (--host 0.0.0.0) "
                                  f"needs at least {MIN_TOKEN_CHARS}"),
                                 (" ", "127.0.0.1", "has spaces at its ends or control characters"),
                                 ("abc\n", "127.0.0.1", "has spaces at its ends or control characters")):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            resolve_token(host, {"GRPO_SEQ_API_TOKEN": token})
    assert resolve_token("127.0.0.1", {"GRPO_SEQ_API_TOKEN": "a"}) == ("a", False)  # this machine only: the user's call
    assert resolve_token("0.0.0.0", {"GRPO_SEQ_API_TOKEN": "x" * MIN_TOKEN_CHARS}) == ("x" * MIN_TOKEN_CHARS, False)


def test_a_stopped_fork_server_is_gone_and_its_owner_starts_a_new_one():
    from multiprocessing import forkserver

    from grpo_seq.serve.jobs import stop_fork_server

    server = forkserver.ForkServer()  # this process's own, not the one the suite's programs fork from
    server.ensure_running()
    first = server._forkserver_pid
    stop_fork_server(server)
    assert not Path(f"/proc/{first}").exists() or not Path("/proc/self/stat").exists()
    server.ensure_running()  # the service's next job, had it one: a new server, not an error
    assert server._forkserver_pid not in (None, first)
    stop_fork_server(server)
    stop_fork_server(server)  # none running: nothing to do
