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
