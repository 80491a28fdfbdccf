"""A real service for the tests: ``python -m grpo_seq.serve`` on a free loopback port, reached
with real HTTP requests (httpx). Waits poll a condition until a bounded deadline."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")
httpx = pytest.importorskip("httpx", reason="an HTTP client: pip install httpx")

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-3f9a"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], Any], deadline: float = 600.0, every: float = 0.05, what: str = "") -> Any:
    """Poll ``condition`` until it returns something true, or fail after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(every)  # the interval between polls, not a wait for an assumed duration
    pytest.fail(f"not within {deadline:.0f} s: {what or condition}")


class Server:
    """One service process over ``store``, with a client that sends the token."""

    def __init__(self, store: Path, *args: str):
        self.store, self.args, self.port = store, args, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.client = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
        self.anonymous = httpx.Client(base_url=self.url, timeout=60)

    def start(self) -> "Server":
        env = {**os.environ, "GRPO_SEQ_API_TOKEN": TOKEN, "TQDM_DISABLE": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        self.log = open(self.store.parent / f"server-{self.port}.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "grpo_seq.serve", "--port", str(self.port), "--store",
                                      str(self.store), *self.args], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self.healthy, 600, what="the service answers /health")
        return self

    def healthy(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, "the service exited"
        try:
            return self.anonymous.get("/health").status_code == 200
        except httpx.TransportError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=90)
        self.proc = None

    def job(self, job_id: str) -> dict:
        res = self.client.get(f"/jobs/{job_id}")
        assert res.status_code == 200, res.text
        return res.json()

    def wait_state(self, job_id: str, states: tuple[str, ...], deadline: float = 600.0) -> dict:
        return wait_for(lambda: (lambda j: j if j["state"] in states else None)(self.job(job_id)), deadline,
                        what=f"job {job_id} reaches {states}")

    def train(self, body: dict, status: int = 202) -> dict:
        res = self.client.post("/train", json=body)
        assert res.status_code == status, f"{res.status_code} {res.text}; jobs: {self.client.get('/jobs').text[:3000]}"
        return res.json()


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    s = Server(tmp_path_factory.mktemp("service") / "store", "--max_jobs", "2").start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _no_job_left_running(request):
    """After each test on the shared service, the jobs it left running are killed and waited
    for: else the next test meets them (``--max_jobs`` answering 429, their files changing
    under a check that nothing was written), whichever order the tests run in, however slow the
    machine."""
    yield
    if "server" not in request.fixturenames:
        return
    server = request.getfixturevalue("server")
    if server.proc is None or server.proc.poll() is not None:
        return
    running = [j["id"] for j in server.client.get("/jobs").json()["jobs"] if j["state"] in ("queued", "running")]
    for job_id in running:
        server.client.delete(f"/jobs/{job_id}", params={"force": "true"})
    for job_id in running:
        server.wait_state(job_id, ("cancelled", "failed", "done"))


# CartPole seed 3 solves within about 1,500 env steps (evaluated every 1,000); it stops one evaluation later.
CARTPOLE = {"env_name": "CartPole-v1", "total_timesteps": 20000, "model_name": "test", "seed": 3, "eval_every": 1000,
            "stop_after_solved": 1}


@pytest.fixture(scope="session")
def trained(server) -> dict:
    """The job of CARTPOLE, trained through the service to its end."""
    job = server.train(CARTPOLE)
    return server.wait_state(job["id"], ("done", "failed"))
