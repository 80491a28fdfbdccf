"""The service's OpenAI-compatible routes over a language model it trained: the real ``openai``
client gets a chat completion from it, ``/v1/models`` lists it, and a refusal is OpenAI's error
body (an unknown model 404, a wrong token 401, too many tokens 400, an env policy 400)."""

from __future__ import annotations

import json

import pytest

from conftest import TOKEN
from test_serve_lm import LM, lm_store  # noqa: F401 - the fixture: the tiny model and dataset in the store

openai = pytest.importorskip("openai", reason="the agents extra: pip install -e '.[agents]'")

CHAT = {**LM, "model_name": "tiny-chat"}
MESSAGES = [{"role": "user", "content": "what is 2 + 2?"}]


@pytest.fixture(scope="module")
def chat_lm(lm_store):  # noqa: F811
    """The service, with the tiny LM trained through it under the name ``tiny-chat``."""
    names = {m["name"] for m in lm_store.client.get("/models").json()["models"]}
    if "tiny-chat" not in names:
        job = lm_store.train(CHAT)
        view = lm_store.wait_state(job["id"], ("done", "failed"))
        assert view["state"] == "done", view
    return lm_store


def client(server, key: str = TOKEN):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=120)


def expected_greedy(server, n: int) -> str:
    """The trained model's own greedy reply to MESSAGES, through its chat template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = json.loads((server.store / "models" / "tiny-chat.json").read_text())["path"]
    tokenizer, lm = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder)
    text = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    enc = tokenizer(text, add_special_tokens=False, return_tensors="pt")
    out = lm.generate(**enc, max_new_tokens=n, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def test_the_openai_client_chats_with_a_trained_model(chat_lm):
    ai = client(chat_lm)
    assert "tiny-chat" in [m.id for m in ai.models.list().data]
    reply = ai.chat.completions.create(model="tiny-chat", messages=MESSAGES, max_tokens=5, temperature=0)
    assert reply.object == "chat.completion" and reply.model == "tiny-chat"
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
    assert choice.message.content == expected_greedy(chat_lm, 5)
    assert 1 <= reply.usage.completion_tokens <= 5 and reply.usage.prompt_tokens > 0
    sampled = ai.chat.completions.create(model="tiny-chat", messages=MESSAGES, max_tokens=3, temperature=1.0, n=2)
    assert len(sampled.choices) == 2 and sampled.usage.completion_tokens <= 6
    streamed = list(ai.chat.completions.create(model="tiny-chat", messages=MESSAGES, max_tokens=5, temperature=0,
                                               stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == choice.message.content
    assert streamed[-1].usage.completion_tokens == reply.usage.completion_tokens


def test_v1_models_lists_language_models_only(chat_lm, trained):
    data = chat_lm.client.get("/v1/models").json()
    assert data["object"] == "list"
    names = [m["id"] for m in data["data"]]
    assert "tiny-chat" in names and "test" not in names  # "test": the CartPole policy


def test_an_unknown_model_is_a_404_in_openais_shape(chat_lm):
    with pytest.raises(openai.NotFoundError) as e:
        client(chat_lm).chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert e.value.status_code == 404 and e.value.body["code"] == "model_not_found"
    raw = chat_lm.client.post("/v1/chat/completions", json={"model": "no-such-model", "messages": MESSAGES})
    assert raw.status_code == 404 and set(raw.json()["error"]) == {"message", "type", "param", "code"}


def test_a_wrong_key_is_a_401_in_openais_shape(chat_lm):
    with pytest.raises(openai.AuthenticationError) as e:
        client(chat_lm, key="wrong-key").chat.completions.create(model="tiny-chat", messages=MESSAGES)
    assert e.value.status_code == 401 and e.value.body["type"] == "authentication_error"
    assert chat_lm.anonymous.get("/v1/models").json()["error"]["code"] == "invalid_api_key"


def test_too_many_tokens_is_a_400(chat_lm):
    with pytest.raises(openai.BadRequestError) as e:
        client(chat_lm).chat.completions.create(model="tiny-chat", messages=MESSAGES, max_tokens=10**6)
    assert e.value.status_code == 400 and e.value.body["param"] == "max_tokens"
    assert "--max_new_tokens" in e.value.body["message"]


def test_an_env_policy_is_no_chat_model(chat_lm, trained):
    assert trained["state"] == "done", trained
    with pytest.raises(openai.BadRequestError) as e:
        client(chat_lm).chat.completions.create(model="test", messages=MESSAGES)
    assert e.value.body["code"] == "model_not_chat"


def test_the_model_cache_keeps_the_most_recently_used(chat_lm, trained):
    from grpo_seq.serve.models import ModelCache
    from grpo_seq.serve.store import Store

    cache = ModelCache(Store(chat_lm.store), max_loaded=1)
    entry, lm = cache.get("tiny-chat")
    assert entry["kind"] == "lm" and cache.cached("tiny-chat") == (entry, lm)  # loaded once, then kept
    assert cache.get("tiny-chat")[1] is lm
    cache.get("test")  # the CartPole policy: one more than the bound lets the language model go
    assert list(cache.loaded) == ["test"] and cache.cached("tiny-chat") is None
