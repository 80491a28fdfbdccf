"""The service over real HTTP: train CartPole to solved and query it, the token, each bad input
refused with nothing written, cancel, a killed job, too many jobs, resume, and a restart."""

from __future__ import annotations

import importlib.util
import json
import os
import signal

import gymnasium as gym
import numpy as np
import pytest

from conftest import CARTPOLE, TOKEN, Server, wait_for
from grpo_seq.io.checkpoint import verify_checkpoint

ROUTES = [("get", "/jobs"), ("get", "/models"), ("post", "/train"), ("post", "/inference"), ("get", "/jobs/x"),
          ("delete", "/jobs/x"), ("get", "/jobs/x/metrics")]


def test_the_service_runs_the_same_job_as_the_command_line(server, trained, tmp_path):
    """One job, every door (tests/jobs/test_doors.py has the CLI, the SB3 class and a spec file):
    the service's run of CARTPOLE evaluates at the same env steps to the same returns as the
    command line's with the same options and seed, and solves at the same step."""
    import json

    from grpo_seq.cli.programs import train_env

    summary = train_env(["--env_id", "CartPole-v1", "--total_env_steps", str(CARTPOLE["total_timesteps"]), "--seed",
                         str(CARTPOLE["seed"]), "--eval_every", str(CARTPOLE["eval_every"]), "--stop_after_solved",
                         str(CARTPOLE["stop_after_solved"]), "--output_dir", str(tmp_path / "cli")])

    def evaluations(run_dir):
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [(r["perf/tokens_total"], r["eval/return"]) for r in rows if "eval/return" in r]

    served = server.store / "jobs" / trained["id"] / "run"
    assert summary["solved_env_steps"] is not None
    assert evaluations(served) == evaluations(tmp_path / "cli")
    assert json.loads((served / "summary.json").read_text())["solved_env_steps"] == summary["solved_env_steps"]


def test_cartpole_trains_to_solved_through_the_api_and_answers_actions(server, trained):
    from grpo_seq.io.serialization import load_policy

    assert trained["state"] == "done", trained
    models = {m["name"]: m for m in server.client.get("/models").json()["models"]}
    assert models["test"]["summary"]["solved"] is True and models["test"]["obs_dim"] == 4
    # the actions the service answers are the saved policy's greedy actions
    envs = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="vector_entry_point")
    obs, _ = envs.reset(seed=123)
    answer = server.client.post("/inference", json={"model_name": "test", "observation": obs.tolist()}).json()
    policy = load_policy(server.store / "jobs" / trained["id"] / "run" / "policy_best")
    local = policy.numpy_actor(greedy=True)(obs.astype(np.float32)).tolist()
    assert answer == {"actions": local}
    single = server.client.post("/inference", json={"model_name": "test", "observation": obs[0].tolist()}).json()
    assert single == {"action": local[0]}
    # and they balance the pole: 8 episodes played by HTTP, one batch request per step (random play: ~22)
    returns, alive = np.zeros(8), np.ones(8, dtype=bool)
    for _ in range(500):
        actions = server.client.post("/inference", json={"model_name": "test", "observation": obs.tolist()}).json()
        obs, reward, terminated, truncated, _ = envs.step(np.array(actions["actions"]))
        returns += np.where(alive, reward, 0)
        alive &= ~(terminated | truncated)
        if not alive.any():
            break
    assert returns.mean() >= 195, returns


def test_a_continuous_action_job_answers_values_within_its_bounds(server):
    job = server.train({"env_name": "Pendulum-v1", "total_timesteps": 800, "model_name": "pendulum", "seed": 0,
                        "eval_every": 800, "solved_return": -200, "action_bins": 5})
    assert server.wait_state(job["id"], ("done", "failed"))["state"] == "done"
    obs = [[1.0, 0.0, 0.0], [0.0, 1.0, -3.0], [-1.0, 0.0, 8.0]]
    answer = server.client.post("/inference", json={"model_name": "pendulum", "observation": obs}).json()
    # torques as the env takes them: one of 5 values from -2 to 2, not the policy's token numbers
    assert len(answer["actions"]) == 3 and all(len(a) == 1 and a[0] in (-2.0, -1.0, 0.0, 1.0, 2.0)
                                               for a in answer["actions"]), answer


@pytest.mark.skipif(importlib.util.find_spec("minatar") is None, reason="needs the minatar extra")
def test_a_pixel_job_of_a_package_that_registers_its_ids_trains_and_answers_frames(server):
    # MinAtar's ids exist in gymnasium only once minatar has registered them: the service does that
    job = server.train({"env_name": "MinAtar/Breakout-v1", "total_timesteps": 400, "model_name": "breakout", "seed": 0})
    assert server.wait_state(job["id"], ("done", "failed"))["state"] == "done"
    frames = np.zeros((2, 10 * 10 * 4))  # two flattened 10 x 10 frames of 4 channels
    answer = server.client.post("/inference", json={"model_name": "breakout", "observation": frames.tolist()}).json()
    assert len(answer["actions"]) == 2 and all(a in range(3) for a in answer["actions"]), answer
    model = _model(server, "breakout")
    assert (model["env_id"], model["obs_dim"], model["num_actions"]) == ("MinAtar/Breakout-v1", 400, 3)


def _model(server: Server, name: str) -> dict:
    return next(m for m in server.client.get("/models").json()["models"] if m["name"] == name)


def test_metrics_are_paged_and_a_finished_job_resumes_with_more_budget(server, trained):
    job_id = trained["id"]
    first = server.client.get(f"/jobs/{job_id}/metrics", params={"offset": 0, "limit": 2}).json()
    rest = server.client.get(f"/jobs/{job_id}/metrics", params={"offset": 2, "limit": 5000}).json()
    lines = (server.store / "jobs" / job_id / "run" / "metrics.jsonl").read_text().splitlines()
    assert first["rows"] + rest["rows"] == [json.loads(x) for x in lines] and first["next_offset"] == 2
    assert any("eval/return" in r for r in rest["rows"])
    smaller = server.client.post(f"/jobs/{job_id}/resume", json={"total_timesteps": 100})
    assert smaller.status_code == 400 and "larger than its 20,000" in smaller.json()["detail"]
    before = _model(server, "test")["created"]
    res = server.client.post(f"/jobs/{job_id}/resume", json={"total_timesteps": 25000})
    assert res.status_code == 202, res.text
    again = server.wait_state(job_id, ("done", "failed"))
    assert again["state"] == "done" and again["resumes"] == 1
    assert _model(server, "test")["created"] > before  # registered again


def test_a_resume_never_re_points_a_model_name_another_job_holds_now(server, trained):
    path = server.store / "models" / "test.json"
    kept = path.read_text()
    path.write_text(json.dumps({**json.loads(kept), "job": "0123456789ab"}))  # as if another job trained "test" since
    try:
        res = server.client.post(f"/jobs/{trained['id']}/resume", json={"total_timesteps": 30000})
    finally:
        path.write_text(kept)
    assert res.status_code == 409, res.text
    assert res.json()["detail"] == (f"job {trained['id']}: its model_name 'test' now belongs to job 0123456789ab; "
                                    "resuming would re-point it to this job's model; train this job's spec under "
                                    "another model_name instead")


def test_a_full_store_is_a_507_and_leaves_no_job_folder(tmp_path, monkeypatch):
    import errno

    import grpo_seq.serve.jobs as jobs
    from grpo_seq.jobs import EnvJob
    from grpo_seq.serve.requests import RequestError
    from grpo_seq.serve.store import Store

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jobs, "save_spec", full)
    store = Store(tmp_path / "store")
    with pytest.raises(RequestError) as refused:
        jobs.JobManager(store, 2).start(EnvJob(env_id="CartPole-v1"), "no-room")
    assert refused.value.status == 507 and "cannot hold a new job: No space left on device" in refused.value.reason
    assert list((tmp_path / "store" / "jobs").iterdir()) == []


def test_a_model_whose_folder_was_removed_is_a_410_naming_the_folder(server, trained):
    path = server.store / "models" / "test.json"
    kept = path.read_text()
    path.write_text(json.dumps({**json.loads(kept), "path": str(server.store / "gone")}))
    try:
        res = server.client.post("/inference", json={"model_name": "test", "observation": [0, 0, 0, 0]})
    finally:
        path.write_text(kept)
    assert res.status_code == 410 and f"its files ({server.store / 'gone'}) are gone" in res.json()["detail"]


def test_every_route_but_health_docs_and_the_page_needs_the_token(server):
    for method, path in ROUTES:
        assert server.anonymous.request(method, path).status_code == 401, path
        wrong = server.anonymous.request(method, path, headers={"Authorization": "Bearer not-" + TOKEN})
        assert wrong.status_code == 401 and wrong.json() == {"detail": "wrong token"}, path
    for path in ("/health", "/docs", "/openapi.json", "/", "/page/app.js"):
        assert server.anonymous.get(path).status_code == 200, path
    # checked before routing: a path no route serves is refused too, and found missing with the token
    assert server.anonymous.get("/no-such-route").status_code == 401
    assert server.client.get("/no-such-route").status_code == 404
    api = server.anonymous.get("/openapi.json").json()
    assert "/train" in api["paths"]
    # the API's page knows every operation needs the bearer token (its Authorize button sends it)
    scheme = api["components"]["securitySchemes"]["HTTPBearer"]
    assert api["security"] == [{"HTTPBearer": []}] and (scheme["type"], scheme["scheme"]) == ("http", "bearer")


def _tree(root) -> dict:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


@pytest.mark.parametrize("path, body, status, reason", [
    ("/train", {"env_name": "NoSuchEnv-v0"}, 400, "not a registered gymnasium env"),
    ("/train", {"env_name": "Pendulum-v1", "action_bins": 1}, 400, "action_bins: must be >= 2"),
    ("/train", {"env_name": "builtins:object"}, 400, "not a registered gymnasium env"),
    ("/train", {**CARTPOLE, "model_name": "../x"}, 400, "not a path"),
    ("/train", {**CARTPOLE, "model_name": "/abs"}, 400, "not a path"),
    ("/train", {**CARTPOLE, "model_name": ""}, 400, "not a path"),
    ("/train", {**CARTPOLE, "model_name": "a" * 65}, 400, "not a path"),
    ("/train", {**CARTPOLE, "model_name": "fresh", "total_timesteps": -5}, 400, "--total_env_steps: must be >= 1"),
    ("/train", {**CARTPOLE, "model_name": "fresh", "total_timesteps": 10**12}, 400, "at most 10,000,000"),
    ("/train", {**CARTPOLE, "model_name": "fresh", "lr": 3}, 400, "unknown option(s) ['lr']"),
    ("/train", {**CARTPOLE, "model_name": "fresh", "output_dir": "/tmp/x"}, 400, "the service chooses"),
    ("/train", {**CARTPOLE, "model_name": "fresh", "learning_rate": "fast"}, 400, "takes float"),
    # the machine owner's bounds, checked before a job starts (ServeConfig's defaults)
    ("/train", {**CARTPOLE, "model_name": "fresh", "hidden_sizes": [30000, 30000]}, 400,
     "a policy of 900,240,002 parameters, over the 10,000,000 of this service (--max_policy_params)"),
    # Pendulum's Gaussian head: one mean per torque dimension, not a logit per value
    ("/train", {"env_name": "Pendulum-v1", "model_name": "fresh", "hidden_sizes": [4000, 4000]}, 400,
     "a policy of 16,024,001 parameters"),
    ("/train", {**CARTPOLE, "model_name": "fresh", "num_generations": 1000, "num_groups": 1000}, 400,
     "at most 1,024 outputs a step on this service (--max_outputs_per_step), got 1000 x 1000"),
    ("/train", {**CARTPOLE, "model_name": "fresh", "save_steps": 1}, 400, "at least 10 steps between them"),
    ("/train", {**CARTPOLE, "model_name": "fresh", "save_total_limit": 0}, 400, "1 to 3 checkpoints kept"),
    ("/train", {**CARTPOLE, "model_name": "fresh", "torch_threads": 1024}, 400, "torch_threads: at most this machine's"),
    ("/train", {**CARTPOLE, "model_name": "fresh", "eval_episodes": 10**12}, 400, "eval_episodes: at most 1,000"),
    ("/train", {"kind": "lm", "dataset": "../../etc/passwd"}, 400, "inside the store's data/"),
    ("/train", {"kind": "text_env", "env_id": "mypkg:Env"}, 400, "this service runs 'env', 'lm' and 'agent' jobs"),
    ("/train", b"not json", 400, "not JSON"),
    ("/train", b"[1, 2]", 400, "must be a JSON object"),
    ("/train", b"{" + b" " * 2_000_000 + b"}", 413, "over 1,048,576 bytes"),
    ("/train", b'{"env_name": "CartPole-v1", "seed": 1, "seed": 2}', 400, "the body gives 'seed' twice"),
    ("/train", b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "nests deeper"),
    ("/train", {"kind": "lm", "dataset": "a\u0000b"}, 400, "dataset: holds a NUL character"),
    ("/train", {"kind": "lm", "dataset": "prompts.jsonl", "reward_fns": ["brevity"], "reward_funcs": ["brevity"]}, 400,
     "give 'reward_fns' or 'reward_funcs'"),
    ("/inference", {"model_name": "test", "observation": ["0.1", 0, 0, 0]}, 400, 'a JSON number, got "0.1"'),
    ("/inference", {"model_name": "test", "observation": [True, 0, 0, 0]}, 400, "a JSON number, got true"),
    ("/inference", {"model_name": "test", "observation": [0.1, 0.2]}, 400, "takes 4 numbers per observation, got 2"),
    ("/inference", {"model_name": "test", "observation": [0.1, float("nan"), 0, 0]}, 400, "NaN"),
    ("/inference", {"model_name": "test", "observation": [[0.1, 0, 0, 0], [0.1]]}, 400, "every row must be 4 numbers"),
    ("/inference", {"model_name": "test", "observation": "up"}, 400, "a list of numbers"),
    ("/inference", {"model_name": "../test", "observation": [0, 0, 0, 0]}, 400, "the name of a model"),
    ("/inference", {"model_name": "nope", "observation": [0, 0, 0, 0]}, 404, "no such model"),
], ids=lambda v: v[:40] if isinstance(v, str) else None)
def test_bad_input_gets_a_4xx_with_one_line_and_changes_nothing(server, trained, path, body, status, reason):
    before = _tree(server.store)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()  # json.dumps writes NaN as NaN
    res = server.client.post(path, content=content, headers={"Content-Type": "application/json"})
    assert res.status_code == status, res.text
    detail = res.json()["detail"]
    assert reason in detail and "\n" not in detail
    assert _tree(server.store) == before


LONG = {"env_name": "CartPole-v1", "total_timesteps": 5_000_000, "eval_every": 0, "seed": 1}


def _pid(server: Server, job_id: str) -> int:
    return json.loads((server.store / "jobs" / job_id / "job.json").read_text())["pid"]


def _wait_stepping(server: Server, job_id: str) -> None:
    """Until the job has taken a training step (it is inside its loop: SIGTERM now checkpoints)."""
    wait_for(lambda: (server.job(job_id)["progress"] or {}).get("done"), what=f"job {job_id} takes a step")


def test_cancel_checkpoints_a_killed_job_fails_and_max_jobs_answers_429(server, trained):
    jobs = [server.train({**LONG, "model_name": name})["id"] for name in ("long-a", "long-b")]
    for job_id in jobs:
        _wait_stepping(server, job_id)
    before = {p.name for p in (server.store / "jobs").iterdir()}
    busy = server.client.post("/train", json={**LONG, "model_name": "long-c"})
    assert busy.status_code == 429 and "--max_jobs" in busy.json()["detail"]
    bad = server.client.post("/train", json={**LONG, "model_name": "long-c", "lr": 3})  # full, and a bad body
    assert bad.status_code == 400 and "unknown option(s) ['lr']" in bad.json()["detail"]
    assert {p.name for p in (server.store / "jobs").iterdir()} == before  # no job folder was made
    cancelled, killed = jobs
    assert server.client.delete(f"/jobs/{cancelled}").status_code == 202
    os.kill(_pid(server, killed), signal.SIGKILL)
    view = server.wait_state(killed, ("failed",))
    assert "killed by SIGKILL" in view["error"] and server.anonymous.get("/health").status_code == 200
    view = server.wait_state(cancelled, ("cancelled", "failed"))
    log = (server.store / "jobs" / cancelled / "log.txt").read_text()
    assert view["state"] == "cancelled" and f"checkpoint written to {view['checkpoint']}" in log, log[-2000:]
    job = (server.store / "jobs" / cancelled).resolve()  # the command it prints resumes it from a shell too
    assert f"Resume with: grpo-seq run {job / 'spec.json'} --resume_from " in log, log[-2000:]
    again = server.client.delete(f"/jobs/{cancelled}")
    assert again.status_code == 409 and again.json()["detail"] == f"job {cancelled}: already cancelled"
    verify_checkpoint(view["checkpoint"])  # complete: every file its manifest lists, with its hash


def test_a_forced_cancel_kills_the_job_at_once(server):
    job_id = server.train({**LONG, "model_name": "long-forced"})["id"]
    _wait_stepping(server, job_id)
    assert server.client.delete(f"/jobs/{job_id}", params={"force": "true"}).status_code == 202
    view = server.wait_state(job_id, ("cancelled", "failed"))
    assert view["state"] == "cancelled" and server.store.joinpath("jobs", job_id, "job.json").is_file()
    assert json.loads((server.store / "jobs" / job_id / "job.json").read_text())["exit_code"] == -signal.SIGKILL


def test_a_restart_finds_the_models_and_names_the_checkpoint_of_a_job_it_left_running(server, trained):
    models = server.client.get("/models").json()
    orphan = server.train({**LONG, "model_name": "orphan"})["id"]
    _wait_stepping(server, orphan)
    worker = _pid(server, orphan)
    ended = {j["id"]: j["state"] for j in server.client.get("/jobs").json()["jobs"] if j["id"] != orphan}
    server.stop(signal.SIGKILL)  # the service dies without a word: its job notices and checkpoints
    wait_for(lambda: not os.path.exists(f"/proc/{worker}"), what="the orphaned job exits")
    server.start()
    assert server.client.get("/models").json() == models
    jobs = {j["id"]: j for j in server.client.get("/jobs").json()["jobs"]}
    assert {k: jobs[k]["state"] for k in ended} == ended
    assert jobs[orphan]["state"] == "failed" and "the service stopped while this job ran" in jobs[orphan]["error"]
    verify_checkpoint(jobs[orphan]["checkpoint"])


def test_a_jobs_full_disk_is_one_line_naming_the_checkpoint_and_the_resume_route(tmp_path):
    import errno

    from grpo_seq.serve.worker import _disk_error_line

    job = tmp_path / "jobs" / "0123456789ab"
    full = OSError(errno.ENOSPC, "No space left on device", str(job / "run" / "metrics.jsonl"))
    assert _disk_error_line(full, job).endswith("; free some space and train again")  # nothing to resume from
    (job / "run" / "checkpoints" / "step_00000003").mkdir(parents=True)
    line = _disk_error_line(full, job)
    assert line.startswith("error: no space left on /") and "\n" not in line
    assert line.endswith(f"the last complete checkpoint, {job / 'run' / 'checkpoints' / 'step_00000003'}, is intact: "
                         "free some space, then resume the job (POST /jobs/0123456789ab/resume)")
