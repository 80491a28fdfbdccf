"""An agent job through the service: its rollout a module of the store's agents/ folder (never code
sent in a request), its items inside data/; the trained model is then served as a language model."""

from __future__ import annotations

import json

import pytest

from test_serve_lm import lm_store  # noqa: F401 - the fixture: the tiny model and prompts.jsonl in the store

pytest.importorskip("openai", reason="the agents extra: pip install -e '.[agents]'")

AGENT = '''
async def rollout(client, item):
    model = (await client.models.list()).data[0].id
    reply = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": item["prompt"]}])
    return float(item["answer"] in (reply.choices[0].message.content or ""))


def not_async(client, item):
    return 0.0
'''
JOB = {"kind": "agent", "model": "base/tiny", "rollout": "adder:rollout", "dataset": "prompts.jsonl",
       "eval_dataset": "prompts.jsonl", "eval_size": 2, "max_steps": 1, "max_completion_length": 4,
       "num_generations": 2, "num_groups": 1, "use_cpu": True, "torch_threads": 1, "model_name": "tiny-agent"}


@pytest.fixture(scope="module")
def agent_store(lm_store):  # noqa: F811
    (lm_store.store / "agents").mkdir(exist_ok=True)
    (lm_store.store / "agents" / "adder.py").write_text(AGENT)
    return lm_store


def test_an_agent_job_trains_and_its_model_answers_chats(agent_store):
    job = agent_store.train(JOB)
    view = agent_store.wait_state(job["id"], ("done", "failed"))
    assert view["state"] == "done", (view, (agent_store.store / "jobs" / job["id"] / "log.txt").read_text()[-3000:])
    run = agent_store.store / "jobs" / job["id"] / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["heldout"]["before"]["items"] == 2  # the held-out rollouts ran
    calls = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if "agent/calls" in x]
    assert calls and calls[0]["agent/calls"] == 1.0  # the agent's one call a rollout, recorded
    model = next(m for m in agent_store.client.get("/models").json()["models"] if m["name"] == "tiny-agent")
    assert model["kind"] == "lm"  # an agent's model is a language model: served as one
    res = agent_store.client.post("/v1/chat/completions", json={
        "model": "tiny-agent", "messages": [{"role": "user", "content": "what is 1 + 1?"}], "max_tokens": 3})
    assert res.status_code == 200 and res.json()["object"] == "chat.completion", res.text


@pytest.mark.parametrize("change, reason", [
    ({"rollout": "os:system"}, "not an agent of this service"),  # a module outside agents/
    ({"rollout": "../adder:rollout"}, "not an agent of this service"),
    ({"rollout": "adder:not_async"}, "not an agent of this service"),  # defined, but no async def
    ({"rollout": "adder:missing"}, "not an agent of this service"),
    ({"rollout": "adder"}, "not an agent of this service"),
    ({"dataset": "../jobs"}, "inside the store's data/"),
    ({"eval_dataset": "missing.jsonl"}, "eval_dataset 'missing.jsonl': give a file or folder inside"),
    ({"endpoint_port": 8000}, "the service chooses the endpoint's port"),
    ({"max_steps": 10**9}, "at most 10,000"),
])
def test_an_agent_job_names_only_what_the_store_holds(agent_store, change, reason):
    before = {p.name for p in (agent_store.store / "jobs").iterdir()} if (agent_store.store / "jobs").exists() else set()
    res = agent_store.client.post("/train", json={**JOB, **change})
    assert res.status_code == 400 and reason in res.json()["detail"], res.text
    after = {p.name for p in (agent_store.store / "jobs").iterdir()} if (agent_store.store / "jobs").exists() else set()
    assert after == before  # nothing was written
