"""The policy endpoint, through the real openai client: it answers, it refuses in OpenAI's words, and
what it records is what the trainer will score (a tiny Llama, float32, on 127.0.0.1)."""

from __future__ import annotations

import asyncio

import openai
import pytest
import torch
from tiny_lm import make_tiny_lm

from agent_programs import tool_then_answer
from grpo_seq.agents.app import make_app
from grpo_seq.agents.endpoint import Limits, PolicyEndpoint
from grpo_seq.agents.server import BackgroundServer
from grpo_seq.agents.trajectory import as_episode, episodes_batch, split_sequences
from grpo_seq.errors import UsageError
from grpo_seq.policies import CausalLMPolicy

KEY, MODEL = "job-key", "tiny"
QUESTION = [{"role": "user", "content": "What is 6 * 7?"}]


@pytest.fixture(scope="module")
def served():
    """A tiny policy behind the endpoint, sampling at temperature 0.7 (scored at it too), 12 new
    tokens a call at most, 200 tokens a call with the prompt."""
    torch.manual_seed(0)
    model, tokenizer = make_tiny_lm()
    endpoint = PolicyEndpoint(tokenizer, MODEL, KEY, Limits(max_tokens=12, max_total_tokens=200, temperature=0.7))
    endpoint.policy = CausalLMPolicy(model, tokenizer)
    server = BackgroundServer(make_app(endpoint))
    yield endpoint, server
    server.stop()


def client(server: BackgroundServer, rollout: str | None = None, key: str = KEY) -> openai.OpenAI:
    base = f"{server.url}/rollouts/{rollout}/v1" if rollout else f"{server.url}/v1"
    return openai.OpenAI(base_url=base, api_key=key, max_retries=0)


def test_an_openai_client_is_answered_and_its_rollout_recorded(served):
    endpoint, server = served
    endpoint.open("one")
    c = client(server, "one")
    assert [m.id for m in c.models.list().data] == [MODEL]
    reply = c.chat.completions.create(model=MODEL, messages=QUESTION, logprobs=True, n=2)
    trajectory = endpoint.close("one")
    assert len(reply.choices) == len(trajectory.calls) == 2
    for choice, call in zip(reply.choices, trajectory.calls):
        # the reply is the recorded completion, token for token, with the recorded log-probs
        assert choice.message.content == endpoint.tokenizer.decode(call.completion_ids, skip_special_tokens=True)
        assert [t.logprob for t in choice.logprobs.content] == call.logprobs
        assert choice.finish_reason == ("stop" if call.ended else "length")
        rendered = endpoint.tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)["input_ids"]
        assert call.prompt_ids == rendered
        assert call.messages == QUESTION
    assert reply.usage.prompt_tokens == len(trajectory.calls[0].prompt_ids)


def test_a_streamed_call_is_answered_with_the_recorded_completion(served):
    """``stream=True`` (what agent harnesses send): the events carry what was recorded, as a call
    without it gets; a refused call is still an error, not a stream."""
    endpoint, server = served
    endpoint.open("streamed")
    c = client(server, "streamed")
    chunks = list(c.chat.completions.create(model=MODEL, messages=QUESTION, logprobs=True, n=2, stream=True,
                                            stream_options={"include_usage": True}))
    with pytest.raises(openai.BadRequestError, match="max_tokens must be from 1 to 12"):
        c.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=13, stream=True)
    text = list(c.completions.create(model=MODEL, prompt="6 * 7 =", stream=True))
    trajectory = endpoint.close("streamed")
    assert len(trajectory.calls) == 3
    for i, call in enumerate(trajectory.calls[:2]):
        mine = [ch.choices[0] for ch in chunks if ch.choices and ch.choices[0].index == i]
        assert "".join(d.delta.content or "" for d in mine) == endpoint.tokenizer.decode(call.completion_ids,
                                                                                         skip_special_tokens=True)
        assert [t.logprob for d in mine if d.logprobs for t in d.logprobs.content] == call.logprobs
        assert mine[-1].finish_reason == ("stop" if call.ended else "length")
    assert chunks[-1].usage.prompt_tokens == len(trajectory.calls[0].prompt_ids)
    assert "".join(ch.choices[0].text for ch in text) == endpoint.tokenizer.decode(trajectory.calls[2].completion_ids,
                                                                                   skip_special_tokens=True)


def test_two_calls_with_a_tool_result_are_one_sequence_scored_as_sampled(served):
    endpoint, server = served
    for rid in ("a", "b"):
        endpoint.open(rid)

    async def both():
        clients = [openai.AsyncOpenAI(base_url=f"{server.url}/rollouts/{rid}/v1", api_key=KEY, max_retries=0)
                   for rid in ("a", "b")]
        return await asyncio.gather(*(tool_then_answer(c, {"question": "What is 6 * 7?"}) for c in clients))

    results = asyncio.run(both())
    trajectories = [endpoint.close(rid) for rid in ("a", "b")]
    episodes = []
    for trajectory, result in zip(trajectories, results):
        sequences = split_sequences(trajectory.calls)
        assert [len(s) for s in sequences] == [2]  # the second call continues the first
        episodes.append(as_episode(sequences[0], result["reward"]))
    tok = endpoint.tokenizer
    batch = episodes_batch(episodes, 2, tok, temperature=0.7)
    for row, (trajectory, e) in enumerate(zip(trajectories, episodes)):
        first, second = trajectory.calls
        n1, glue = len(first.completion_ids), len(second.prompt_ids) - len(first.ids)
        # the first reply trained, then the tool's turn (with the template's glue) masked, then the second reply
        assert batch.mask[row, :n1].all() and not batch.mask[row, n1:n1 + glue].any()
        assert batch.mask[row, n1 + glue:n1 + glue + len(second.completion_ids)].all()
        between = tok.decode(batch.tokens[row, n1:n1 + glue].tolist())
        assert "TOOL-RESULT 42" in between and between.endswith("<|im_start|>assistant\n")
        assert [m["trained"] for m in e.messages] == [True, False, True]
        assert batch.text.completions[row][1]["content"] == "TOOL-RESULT 42"
    # the trainer's scoring of the whole sequences gives back the log-probs each call sampled
    with torch.no_grad():
        logp, _ = endpoint.policy(batch, with_entropy=False)
    assert batch.mask.sum() == sum(len(c.completion_ids) for t in trajectories for c in t.calls)
    assert torch.allclose(logp[batch.mask], batch.sampler_logp[batch.mask], atol=1e-5, rtol=0)


@pytest.mark.parametrize("ask, error, words", [
    ({"key": "wrong"}, openai.AuthenticationError, "Incorrect API key"),
    ({"model": "gpt-4o"}, openai.NotFoundError, "'gpt-4o' does not exist here: this endpoint serves 'tiny'"),
    ({"max_tokens": 13}, openai.BadRequestError, "max_tokens must be from 1 to 12"),
    ({"temperature": 1.0}, openai.BadRequestError, "a rollout samples at the job's temperature 0.7"),
    ({"messages": [{"role": "user", "content": "x" * 190}]}, openai.BadRequestError, "exceed the job's 200 tokens"),
    ({"rollout": "ended"}, openai.NotFoundError, "no rollout 'ended' is open"),
])
def test_a_refused_call_gets_an_openai_error_naming_it(served, ask, error, words):
    endpoint, server = served
    endpoint.open("open")
    try:
        c = client(server, ask.get("rollout", "open"), ask.get("key", KEY))
        with pytest.raises(error, match=words.replace("(", r"\(").replace("*", r"\*")) as caught:
            c.chat.completions.create(model=ask.get("model", MODEL), messages=ask.get("messages", QUESTION),
                                      **{k: v for k, v in ask.items() if k in ("max_tokens", "temperature")})
        assert caught.value.body["message"] == caught.value.message.split(" - ", 1)[1]  # OpenAI's error body
    finally:
        assert endpoint.close("open").calls == []  # nothing refused was recorded


def test_a_taken_port_is_one_line_naming_it(served):
    _, server = served
    with pytest.raises(UsageError, match=rf"--endpoint_port {server.port}: cannot listen on 127.0.0.1:{server.port}"):
        BackgroundServer(make_app(served[0]), server.port)


def test_text_completions_continue_by_ids_and_are_scored_as_sampled(served):
    endpoint, server = served
    for rid in ("t1", "t2"):
        endpoint.open(rid)
        c = client(server, rid)
        first = c.completions.create(model=MODEL, prompt="Question: 6 * 7 =", max_tokens=5, logprobs=1)
        text = "Question: 6 * 7 =" + first.choices[0].text + "\nCheck:"
        second = c.completions.create(model=MODEL, prompt=text, max_tokens=5)
        assert second.usage.prompt_tokens == len(endpoint.trajectories[rid].calls[1].prompt_ids)
    trajectories = [endpoint.close(rid) for rid in ("t1", "t2")]
    assert trajectories[1].calls[0].logprobs == first.choices[0].logprobs.token_logprobs
    episodes = []
    for t in trajectories:
        assert [len(s) for s in split_sequences(t.calls)] == [2]  # the second text continues the first
        episodes.append(as_episode(split_sequences(t.calls)[0], 0.0))
    batch = episodes_batch(episodes, 2, endpoint.tokenizer, temperature=0.7)
    with torch.no_grad():
        logp, _ = endpoint.policy(batch, with_entropy=False)
    assert torch.allclose(logp[batch.mask], batch.sampler_logp[batch.mask], atol=1e-5, rtol=0)
    # between the two replies, masked: the text the agent added (the tokens after the batch's end are padding)
    assert endpoint.tokenizer.decode(batch.tokens[1][~batch.mask[1]][:7].tolist()) == "\nCheck:"
