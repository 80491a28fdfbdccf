"""The OpenAI chat-completions and completions wire formats, as much of them as the endpoint speaks.

A request (:class:`ChatRequest`: ``model``, ``messages``, ``tools``, ``n``, ``temperature``,
``top_p``, ``max_tokens`` or ``max_completion_tokens``, ``logprobs``; other fields an agent
framework sends, such as ``tool_choice`` or ``seed``, are accepted and have no effect), a reply
(:func:`completion_body`) and an error (:class:`APIError`, whose body is OpenAI's
``{"error": {"message", "type", "param", "code"}}``, so that the ``openai`` client raises its
own exception class for the status with our message). A text completion (:class:`TextRequest`:
one ``prompt``, text or token ids; ``logprobs`` as a number) answers with
:func:`text_completion_body`.

With ``stream: true`` the same reply comes as server-sent events (:func:`chat_chunks`,
:func:`text_chunks`), ending with ``data: [DONE]``, as agent harnesses that always stream expect.

A reply that holds Hermes-style tool calls (``<tool_call>{"name": ..., "arguments": ...}</tool_call>``,
what Qwen's and SmolLM's templates teach) comes back with them as ``tool_calls``, the text around
them as its ``content``.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict

__all__ = ["ChatRequest", "TextRequest", "APIError", "error_body", "parse_tool_calls", "reply_message",
           "completion_body", "text_completion_body", "chat_chunks", "text_chunks"]

_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


class ChatRequest(BaseModel):
    """A ``/v1/chat/completions`` request body."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None


class TextRequest(BaseModel):
    """A ``/v1/completions`` request body: one prompt, as text or as token ids."""

    model_config = ConfigDict(extra="allow")

    model: str
    prompt: str | list[int]
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    logprobs: int | None = None
    echo: bool | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None


class APIError(Exception):
    """A refused request: its HTTP status and OpenAI's error fields."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind


def error_body(e: APIError) -> dict[str, Any]:
    return {"error": {"message": e.message, "type": e.kind, "param": e.param, "code": e.code}}


def parse_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """``(content, tool_calls)`` of a reply's text: each well-formed ``<tool_call>`` block as an
    OpenAI tool call (arguments as a JSON string), the rest as the content. A block that is not
    JSON with a ``name`` stays in the content, as the model wrote it."""
    calls: list[dict[str, Any]] = []

    def take(match: re.Match) -> str:
        try:
            call = json.loads(match.group(1))
        except json.JSONDecodeError:
            return match.group(0)
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return match.group(0)
        arguments = call.get("arguments", {})
        calls.append({"id": f"call_{len(calls)}", "type": "function",
                      "function": {"name": call["name"],
                                   "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}})
        return ""

    content = _TOOL_CALL.sub(take, text)
    return (content.strip() if calls else content), calls


def reply_message(text: str, tools_offered: bool) -> dict[str, Any]:
    """The assistant message of a reply's text (tool calls parsed out when tools were offered)."""
    content, calls = parse_tool_calls(text) if tools_offered else (text, [])
    message: dict[str, Any] = {"role": "assistant", "content": content if (content or not calls) else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _logprobs(tokens: list[str], logprobs: list[float]) -> dict[str, Any]:
    return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                        for t, lp in zip(tokens, logprobs)]}


def completion_body(request_id: str, model: str, choices: list[dict[str, Any]], prompt_tokens: int,
                    with_logprobs: bool) -> dict[str, Any]:
    """A ``chat.completion`` object. ``choices``: each a dict of ``message``, ``ended``, ``tokens``
    (the completion's token strings) and ``logprobs``."""
    out, completion_tokens = [], 0
    for i, c in enumerate(choices):
        completion_tokens += len(c["tokens"])
        finish = "tool_calls" if c["message"].get("tool_calls") else ("stop" if c["ended"] else "length")
        out.append({"index": i, "message": c["message"], "finish_reason": finish,
                    "logprobs": _logprobs(c["tokens"], c["logprobs"]) if with_logprobs else None})
    return {"id": request_id, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": out, "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                      "total_tokens": prompt_tokens + completion_tokens}}


def text_completion_body(request_id: str, model: str, choices: list[dict[str, Any]], prompt_tokens: int,
                         with_logprobs: bool) -> dict[str, Any]:
    """A ``text_completion`` object, of the same ``choices`` as :func:`completion_body`."""
    out, completion_tokens = [], 0
    for i, c in enumerate(choices):
        completion_tokens += len(c["tokens"])
        offsets = [sum(len(t) for t in c["tokens"][:k]) for k in range(len(c["tokens"]))]
        logprobs = {"tokens": c["tokens"], "token_logprobs": c["logprobs"], "top_logprobs": None,
                    "text_offset": offsets}
        out.append({"index": i, "text": c["message"]["content"], "finish_reason": "stop" if c["ended"] else "length",
                    "logprobs": logprobs if with_logprobs else None})
    return {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": out, "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                      "total_tokens": prompt_tokens + completion_tokens}}


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def chat_chunks(body: dict[str, Any], include_usage: bool) -> Iterator[str]:
    """A ``chat.completion`` body (:func:`completion_body`) as the server-sent events of
    ``stream=True``: per choice its role, then its content (with its log-probs) or tool calls, then
    its finish reason; the usage when ``stream_options.include_usage`` asks; then ``[DONE]``. The
    reply is generated whole before the first event (calls are generated in batches), so a choice
    arrives in one content chunk."""
    head = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}
    for choice in body["choices"]:
        message, i = choice["message"], choice["index"]
        yield _sse({**head, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                         "logprobs": None, "finish_reason": None}]})
        if message.get("content"):
            yield _sse({**head, "choices": [{"index": i, "delta": {"content": message["content"]},
                                             "logprobs": choice["logprobs"], "finish_reason": None}]})
        if message.get("tool_calls"):
            calls = [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]
            yield _sse({**head, "choices": [{"index": i, "delta": {"tool_calls": calls}, "logprobs": None,
                                             "finish_reason": None}]})
        yield _sse({**head, "choices": [{"index": i, "delta": {}, "logprobs": None,
                                         "finish_reason": choice["finish_reason"]}]})
    if include_usage:
        yield _sse({**head, "choices": [], "usage": body["usage"]})
    yield "data: [DONE]\n\n"


def text_chunks(body: dict[str, Any], include_usage: bool) -> Iterator[str]:
    """A ``text_completion`` body as ``stream=True``'s events: per choice its text, then its finish reason."""
    head = {"id": body["id"], "object": "text_completion", "created": body["created"], "model": body["model"]}
    for choice in body["choices"]:
        yield _sse({**head, "choices": [{**choice, "finish_reason": None}]})
        yield _sse({**head, "choices": [{"index": choice["index"], "text": "", "logprobs": None,
                                         "finish_reason": choice["finish_reason"]}]})
    if include_usage:
        yield _sse({**head, "choices": [], "usage": body["usage"]})
    yield "data: [DONE]\n\n"
