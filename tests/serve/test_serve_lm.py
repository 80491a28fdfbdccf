"""A language-model job through the service: a model and a dataset inside the store, reward
functions by name; the trained model answers a prompt with its greedy completion."""

from __future__ import annotations

import json

import pytest

from tiny_lm import save_tiny_lm

LM = {"model": "base/tiny", "dataset": "prompts.jsonl", "reward_fns": ["format"], "max_steps": 1,
      "max_completion_length": 4, "num_generations": 2, "num_groups": 1, "use_cpu": True, "torch_threads": 1,
      "log_completions_every": 0, "model_name": "tiny-lm"}


@pytest.fixture(scope="module")
def lm_store(server):
    save_tiny_lm(server.store / "base" / "tiny")
    rows = [{"prompt": f"what is {i} + {i}?", "answer": str(2 * i)} for i in range(4)]
    (server.store / "data" / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return server


@pytest.mark.parametrize("change, reason", [
    ({"reward_fns": ["os:system"]}, "not a reward function of this service"),
    ({"model": "/etc"}, "not a language model of this service"),
    ({"dataset": "missing.jsonl"}, "inside the store's data/"),
    ({"max_steps": 10**9}, "at most 10,000"),
    ({"trust_remote_code": True}, "the service chooses"),
    ({"dataset": "."}, "inside the store's data/"),  # the data folder itself is no dataset
    ({"model": "."}, "not a language model of this service"),  # the store holds no config.json of a model
    ({"reward_fns": ["reward_fns.gsm8k:re"]}, "is not a reward function of this service"),  # a module there
])
def test_a_language_model_job_names_only_what_the_store_holds(lm_store, change, reason):
    res = lm_store.client.post("/train", json={**LM, **change})
    assert res.status_code == 400 and reason in res.json()["detail"], res.text


def test_a_language_model_trains_and_completes_a_prompt(lm_store):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    job = lm_store.train(LM)
    view = lm_store.wait_state(job["id"], ("done", "failed"))
    assert view["state"] == "done", view
    model = next(m for m in lm_store.client.get("/models").json()["models"] if m["name"] == "tiny-lm")
    assert model["kind"] == "lm"
    res = lm_store.client.post("/inference", json={"model_name": "tiny-lm", "prompt": "what is 2 + 2?",
                                                   "max_new_tokens": 5})
    assert res.status_code == 200, res.text
    path = lm_store.store / "jobs" / job["id"] / "run" / "model"
    tokenizer, lm = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    enc = tokenizer("what is 2 + 2?", return_tensors="pt")
    out = lm.generate(**enc, max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert res.json() == {"completion": tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)}
    bad = lm_store.client.post("/inference", json={"model_name": "tiny-lm", "prompt": "hi", "max_new_tokens": 10**6})
    assert bad.status_code == 400 and "max_new_tokens" in bad.json()["detail"]
    # a prompt past the model's context is refused at once, not left generating with the model's lock held
    long = lm_store.client.post("/inference", json={"model_name": "tiny-lm", "prompt": "7" * 600, "max_new_tokens": 4})
    assert long.status_code == 400 and "pass this model's context of 512 tokens" in long.json()["detail"], long.text
