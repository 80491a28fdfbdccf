"""Tool calls in a reply's text become OpenAI tool calls; what is not one stays the model's text."""

from __future__ import annotations

import json

from grpo_seq.agents.openai_format import parse_tool_calls, reply_message


def test_hermes_tool_calls_become_openai_tool_calls_and_the_rest_stays_content():
    text = 'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 7"}}\n</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Let me compute."
    assert calls == [{"id": "call_0", "type": "function",
                      "function": {"name": "calculator", "arguments": json.dumps({"expression": "6 * 7"})}}]
    message = reply_message(text, tools_offered=True)
    assert message["tool_calls"] == calls and message["content"] == "Let me compute."


def test_what_is_not_a_tool_call_stays_as_the_model_wrote_it():
    broken = "<tool_call>{not json}</tool_call> and <tool_call>[1, 2]</tool_call>"
    assert parse_tool_calls(broken) == (broken, [])
    only_call = '<tool_call>{"name": "f", "arguments": "{}"}</tool_call>'
    assert reply_message(only_call, tools_offered=True)["content"] is None  # a call and nothing else: no content
    assert reply_message(only_call, tools_offered=False) == {"role": "assistant", "content": only_call}


def test_a_streamed_reply_reassembles_into_the_reply_itself():
    """The events of ``stream=True``, read by the openai package's own accumulator, give back the
    body a call without ``stream`` gets: content with its log-probs, tool calls, finish reasons, usage."""
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    from grpo_seq.agents.openai_format import chat_chunks, completion_body

    said = {"message": reply_message("It is 42.", False), "ended": True, "tokens": ["It", " is", " 42", "."],
            "logprobs": [-0.5, -0.25, -1.0, -0.125]}
    called = {"message": reply_message('<tool_call>{"name": "calc", "arguments": {"x": "6*7"}}</tool_call>', True),
              "ended": True, "tokens": ["<tool_call>", "..."], "logprobs": [-0.1, -0.2]}
    body = completion_body("chatcmpl-1", "tiny", [said, called], 9, with_logprobs=True)
    events = list(chat_chunks(body, include_usage=True))
    assert events[-1] == "data: [DONE]\n\n" and all(e.startswith("data: ") and e.endswith("\n\n") for e in events)
    state = ChatCompletionStreamState()
    for event in events[:-1]:
        state.handle_chunk(ChatCompletionChunk.model_validate(json.loads(event[len("data: "):])))
    final = state.get_final_completion()
    assert final.usage.model_dump() == {**body["usage"], "completion_tokens_details": None, "prompt_tokens_details": None}
    first, second = final.choices
    assert first.message.content == "It is 42." and first.finish_reason == "stop"
    assert [t.logprob for t in first.logprobs.content] == said["logprobs"]
    assert second.finish_reason == "tool_calls" and not second.message.content
    (call,) = second.message.tool_calls
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == ("call_0", "calc", {"x": "6*7"})
    assert list(chat_chunks(body, include_usage=False))[-2].count('"usage"') == 0  # usage only when asked
