"""Load on the HTTP service (``grpo-seq serve``): 16 concurrent inference clients on a CartPole
policy, loopback only, bounded in time and count, with a training job running beside them.

    python benchmarks/serve_load.py --seconds 10

Starts the service on a free 127.0.0.1 port over a temporary store, trains CartPole through
``POST /train``, starts a long training job beside it (``--no_training``: none), then for each
phase runs ``--clients`` clients that send ``POST /inference`` back to back for ``--seconds`` or
``--max_requests``, whichever ends first. ``--client stdlib`` (the default): each client a
process of its own holding one kept-alive connection (Python's ``http.client``), as separate
programs querying the service would; ``--client httpx``: httpx connection pools driven by asyncio
tasks, spread over ``--client_processes`` processes. The clients run on the same cores as the
service, so what a client spends per request is taken from the service: httpx's async pool
spends several times what the service does, http.client a fraction of it.
- single: one observation per request: requests per second, p50 and p99 latency;
- batch: ``--batch`` observations per request: observations per second, and its ratio to the
  single phase's (targets: >= 1,000 requests/s with p99 <= 25 ms; the ratio >= 50).
Writes the record (benchmarks/record.py) to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "serve-load-token"


def start_service(store: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "GRPO_SEQ_API_TOKEN": TOKEN,
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-m", "grpo_seq.serve", "--port", str(port), "--store", str(store)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    poll(lambda: _healthy(port), 120, "the service answers /health")
    return proc


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
    except httpx.TransportError:
        return False


def poll(condition, deadline: float, what: str):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"error: not within {deadline:.0f} s: {what}")


def job_state(client: httpx.Client, job_id: str, states: tuple[str, ...]) -> dict | None:
    job = client.get(f"/jobs/{job_id}").json()
    return job if job["state"] in states or (job.get("progress") or {}).get("done") and "stepping" in states else None


def _bodies(rows: np.ndarray, batch: int, seed: int, count: int = 64) -> list[bytes]:
    """``count`` request bodies of ``batch`` observations drawn from ``rows``, encoded once: a
    client sends them in turn, so the cores the clients share with the service go to the
    service's work (every body is still parsed, checked and answered), not to the clients
    encoding the same JSON again."""
    rng = np.random.default_rng(seed)
    obs = (rows[rng.integers(len(rows), size=batch)].tolist() for _ in range(count))
    return [json.dumps({"model_name": "cartpole", "observation": o if batch > 1 else o[0]}).encode() for o in obs]


async def _clients(url: str, clients: int, end: float, max_requests: int, rows: np.ndarray, batch: int,
                   seed: int) -> list[float]:
    """``clients`` tasks of one process sending inference requests back to back; each request's latency."""
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKEN}",
                                                        "Content-Type": "application/json"}, limits=limits,
                                 timeout=30) as client:
        async def one(i: int) -> None:
            bodies = _bodies(rows, batch, seed + i)
            while time.time() < end and len(latencies) < max_requests:
                body = bodies[len(latencies) % len(bodies)]
                t0 = time.perf_counter()
                res = await client.post("/inference", content=body)
                latencies.append(time.perf_counter() - t0)
                assert res.status_code == 200, res.text

        await asyncio.gather(*(one(i) for i in range(clients)))
    return latencies


def _client_process(args: tuple) -> list[float]:
    return asyncio.run(_clients(*args))


def _stdlib_client(args: tuple) -> list[float]:
    """One client in a process of its own: one kept-alive connection (``http.client``), requests
    back to back, each answer read and parsed; each request's latency. The process is its
    client's alone, so a latency is the service's and the machine's, not other clients' turns
    on a shared event loop."""
    import http.client

    url, end, max_requests, rows, batch, seed = args
    host, port = url.removeprefix("http://").split(":")
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    bodies = _bodies(rows, batch, seed)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    latencies: list[float] = []
    while time.time() < end and len(latencies) < max_requests:
        t0 = time.perf_counter()
        conn.request("POST", "/inference", bodies[len(latencies) % len(bodies)], headers)
        res = conn.getresponse()
        answer = json.loads(res.read())
        latencies.append(time.perf_counter() - t0)
        assert res.status == 200, answer
    conn.close()
    return latencies


def phase(url: str, clients: int, processes: int, seconds: float, max_requests: int, rows: np.ndarray,
          batch: int, client: str = "stdlib") -> dict:
    """``clients`` clients: with ``client`` "stdlib" one process each; with "httpx" spread over
    ``processes`` client processes (one asyncio loop each: a single Python client process, not
    the service, would set the pace)."""
    import multiprocessing

    end = time.time() + seconds
    if client == "stdlib":
        run, jobs = _stdlib_client, [(url, end, max_requests // clients, rows, batch, 1000 * k) for k in range(clients)]
    else:
        shares = [clients // processes + (k < clients % processes) for k in range(processes)]
        run, jobs = _client_process, [(url, n, end, max_requests // processes, rows, batch, 1000 * k)
                                      for k, n in enumerate(shares) if n]
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(len(jobs)) as pool:
        latencies = [x for part in pool.map(run, jobs) for x in part]
    wall = time.perf_counter() - t0
    ms = sorted(1000 * x for x in latencies)
    return {"requests": len(ms), "seconds": wall, "requests_per_second": len(ms) / wall,
            "observations_per_second": len(ms) * batch / wall, "p50_ms": statistics.median(ms),
            "p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))], "batch": batch, "client": client,
            "client_processes": len(jobs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="Length of each phase.")
    ap.add_argument("--max_requests", type=int, default=200_000, help="Most requests of each phase.")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--client", choices=("stdlib", "httpx"), default="stdlib",
                    help="stdlib: each client a process with one http.client connection; httpx: asyncio httpx pools.")
    ap.add_argument("--client_processes", type=int, default=2, help="Processes the httpx clients are spread over.")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--no_training", action="store_true", help="No training job beside the clients.")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    meta = record.meta()
    with tempfile.TemporaryDirectory() as d:
        port = int(poll(lambda: _free_port(), 5, "a free port"))
        url = f"http://127.0.0.1:{port}"
        service = start_service(Path(d) / "store", port)
        try:
            result = run_phases(a, url)
        finally:
            service.terminate()
            service.wait(timeout=120)
    # other work on the machine shares the cores with the clients, the service and the job
    result = {"clients": a.clients, "training_beside": not a.no_training, "load_average_1min": os.getloadavg()[0],
              **result}
    print(json.dumps(result, indent=2))
    out = a.out or record.default_out("serve_load")
    record.prepare(out).write_text(json.dumps({"meta": meta, **result}, indent=2))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_phases(a: argparse.Namespace, url: str) -> dict:
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    job = client.post("/train", json={"env_name": "CartPole-v1", "total_timesteps": 20000, "model_name": "cartpole",
                                      "seed": 3, "eval_every": 1000, "stop_after_solved": 1}).json()
    done = poll(lambda: job_state(client, job["id"], ("done", "failed")), 300, "the CartPole job ends")
    assert done["state"] == "done", done
    if not a.no_training:
        beside = client.post("/train", json={"env_name": "CartPole-v1", "total_timesteps": 10_000_000,
                                             "eval_every": 0, "model_name": "beside"}).json()
        poll(lambda: (client.get(f"/jobs/{beside['id']}").json().get("progress") or {}).get("done"), 120,
             "the training job beside the clients steps")
    import gymnasium as gym

    envs = gym.make_vec("CartPole-v1", num_envs=256, vectorization_mode="vector_entry_point")
    rows = np.concatenate([envs.reset(seed=s)[0] for s in range(4)])  # 1,024 start observations
    single = phase(url, a.clients, a.client_processes, a.seconds, a.max_requests, rows, 1, a.client)
    batch = phase(url, a.clients, a.client_processes, a.seconds, a.max_requests, rows, a.batch, a.client)
    if not a.no_training:
        client.delete(f"/jobs/{beside['id']}")
        state = client.get(f"/jobs/{beside['id']}").json()
        beside_steps = (state.get("progress") or {}).get("done")
    return {"single": single, "batch": batch,
            "batch_to_single_observations_per_second": batch["observations_per_second"] / single["observations_per_second"],
            "training_env_steps_during_phases": beside_steps if not a.no_training else None}


if __name__ == "__main__":
    main()
