"""Calls to sequences and sequences to the batch, on hand-made ids (the endpoint's own tests check
that real calls come out this way)."""

from __future__ import annotations

import pytest
from tiny_lm import make_tokenizer

from grpo_seq.agents.prompts import PromptBuilder, continued_call
from grpo_seq.agents.trajectory import Call, as_episode, episodes_batch, split_sequences

ASK = [{"role": "user", "content": "q"}]
REPLY = {"role": "assistant", "content": "r"}


def call(prompt, completion, ended=True, messages=ASK, reply=REPLY) -> Call:
    return Call(list(prompt), list(completion), [-0.5] * len(completion), list(messages), dict(reply), ended)


def test_a_call_that_extends_an_earlier_one_continues_its_sequence_and_a_rewrite_starts_one():
    first = call([1, 2], [3, 4])
    second = call([1, 2, 3, 4, 9, 9], [5])  # the first's prompt and reply, then a tool's turn
    rewritten = call([1, 7], [8])  # the harness summarised the history: extends nothing
    third = call([1, 2, 3, 4, 9, 9, 5, 6], [7])  # goes on from the second
    assert split_sequences([first, second, rewritten, third]) == [[first, second, third], [rewritten]]
    # the prompt must hold the whole earlier completion, not part of it
    assert split_sequences([first, call([1, 2, 3], [4])]) == [[first], [call([1, 2, 3], [4])]]


def test_a_sequence_trains_the_replies_and_masks_the_rest():
    tool = {"role": "tool", "content": "42"}
    first = call([1, 2], [3, 4])
    second = call([1, 2, 3, 4, 9, 9], [5, 6], ended=False, messages=[*ASK, REPLY, tool])
    e = as_episode([first, second], reward=2.0, call_rewards=[0.5, 1.5])
    assert (e.prompt_ids, e.ids) == ([1, 2], [3, 4, 9, 9, 5, 6])
    assert e.trained == [True, True, False, False, True, True]
    assert e.turn_of == [0, 0, -1, -1, 1, 1]
    assert e.token_rewards == [0, 0.5, 0, 0, 0, 1.5]  # each call's reward on its reply's last token
    assert (e.total, e.truncated) == (2.0, True)  # the last reply was cut at max_tokens
    roles = [(m["role"], m["trained"]) for m in e.messages]
    assert roles == [("assistant", True), ("tool", False), ("assistant", True)]
    # without per-call rewards the whole reward sits on the last reply's last token
    assert as_episode([first, second], reward=2.0).token_rewards == [0, 0, 0, 0, 0, 2.0]


def test_the_batch_lays_sequences_out_as_a_text_environment_does():
    tok = make_tokenizer()
    short = as_episode([call([1, 2, 3], [4])], reward=1.0)
    long = as_episode([call([1, 2], [3, 4]), call([1, 2, 3, 4, 9], [5])], reward=0.0)
    batch = episodes_batch([short, long], 2, tok, temperature=0.7, metrics={"agent/calls": 1.5})
    pad = tok.pad_token_id
    assert batch.context.tolist() == [[1, 2, 3], [pad, 1, 2]] and batch.prompt_mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    assert batch.tokens.tolist() == [[4, pad, pad, pad], [3, 4, 9, 5]]
    assert batch.mask.tolist() == [[True, False, False, False], [True, True, False, True]]
    assert batch.step_index.tolist() == [[0, -1, -1, -1], [0, 0, -1, 1]]
    assert batch.sampler_logp.tolist() == [[-0.5, 0, 0, 0], [-0.5, -0.5, 0, -0.5]]
    assert batch.rewards.tolist() == [1.0, 0.0] and batch.group.tolist() == [0, 0] and batch.temperature == 0.7
    assert batch.text.completion_ids == [[4], [3, 4, 5]] and batch.metrics == {"agent/calls": 1.5}


@pytest.mark.parametrize("sent, continues", [
    ({"role": "assistant", "content": "r"}, True),
    ({"role": "assistant", "content": "edited"}, False),  # the harness rewrote the reply: not a continuation
])
def test_a_continuing_prompt_is_the_sampled_ids_then_the_new_turn(sent, continues):
    tok = make_tokenizer()
    builder = PromptBuilder(tok)
    prompt = builder.ids(ASK, None, [])
    reply_ids = tok("r<|im_end|>", add_special_tokens=False)["input_ids"]
    earlier = Call(prompt, reply_ids, [0.0] * len(reply_ids), ASK, REPLY, ended=True)
    messages = [*ASK, sent, {"role": "tool", "content": "42"}]
    assert (continued_call(messages, [earlier]) is earlier) == continues
    ids = builder.ids(messages, None, [earlier])
    # the template's own rendering of the whole conversation: the same ids here (a character tokenizer)
    assert ids == tok.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
    assert (ids[:len(earlier.ids)] == earlier.ids) == continues
