"""A chat request's messages (and tools) as prompt ids, continuing a rollout's earlier calls by ids.

Rendering the whole conversation afresh at every call would re-tokenise the model's earlier
replies, and a tokenizer need not give back the ids it sampled (BPE merges across the reply's
edge, a tool call the template re-renders from its JSON): the ids trained would then differ from
the ids sampled. So when a request's messages are an earlier call's messages, that call's reply,
then new messages, its prompt is that call's prompt and completion ids, as sampled, followed by
the new messages' ids as the template glues them after an assistant turn
(:meth:`grpo_seq.envs.text.chat.ChatFormat.messages_ids`, as a text environment's tool results
join its conversations). Any other request is rendered whole, and so is every request for a
template that renders earlier turns differently once one is added (such a conversation cannot
grow by ids: each call then starts a sequence of its own). A text completion (``/v1/completions``)
continues an earlier one the same way when its text begins with that call's prompt and reply.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..envs.text.chat import ChatFormat
from ..errors import UsageError
from .trajectory import Call

__all__ = ["PromptBuilder", "continued_call", "TEXT_PROMPT"]

TEXT_PROMPT = "prompt"  # the role a text completion's prompt is recorded under (its call's one message)


def _same_reply(sent: dict[str, Any], reply: dict[str, Any]) -> bool:
    """Whether the assistant message a client sent back is the reply it was given: the same text,
    the same tool calls by name and arguments (clients may drop null fields or rename ids)."""
    if sent.get("role") != "assistant" or (sent.get("content") or "") != (reply.get("content") or ""):
        return False
    calls = lambda m: [(c.get("function", {}).get("name"), c.get("function", {}).get("arguments"))  # noqa: E731
                       for c in (m.get("tool_calls") or [])]
    return calls(sent) == calls(reply)


def continued_call(messages: Sequence[dict[str, Any]], calls: Sequence[Call]) -> Call | None:
    """The latest of ``calls`` that ``messages`` continue (its messages, its reply, then at least
    one more message), or None."""
    for call in reversed(calls):
        n = len(call.messages)
        if len(messages) > n + 1 and list(messages[:n]) == call.messages and _same_reply(messages[n], call.reply):
            return call
    return None


class PromptBuilder:
    """Prompt ids for ``tokenizer``: :meth:`ids` of a request, given the rollout's earlier calls."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.chat = getattr(tokenizer, "chat_template", None) is not None
        self._formats: dict[str, ChatFormat] = {}

    def _format(self, tools: list[dict[str, Any]] | None) -> ChatFormat:
        key = repr(tools)
        if key not in self._formats:
            self._formats[key] = ChatFormat(self.tokenizer, tools=tools)
        return self._formats[key]

    def render(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """The whole conversation through the chat template, with the generation prompt (without
        a template: the messages' contents, one a line)."""
        if not self.chat:
            text = "".join(f"{m.get('content') or ''}\n" for m in messages)
            return self.tokenizer(text, add_special_tokens=True)["input_ids"]
        text = self.tokenizer.apply_chat_template(list(messages), tools=tools, tokenize=False,
                                                  add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def ids(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None,
            earlier: Sequence[Call]) -> list[int]:
        """``messages``' prompt ids: an earlier call's ids extended by the new messages when they
        continue it (:func:`continued_call`), else the whole conversation rendered."""
        call = continued_call(messages, earlier) if self.chat else None
        if call is not None:
            new = [dict(m) for m in messages[len(call.messages) + 1:]]
            try:
                return call.ids + self._format(tools).messages_ids(new, reply_ended=call.ended)
            except UsageError:  # a template that re-renders earlier turns: the conversation cannot grow by ids
                pass
        return self.render(messages, tools)

    def text_ids(self, prompt: str | list[int], earlier: Sequence[Call]) -> list[int]:
        """A text completion's prompt ids: token ids as given; a text that begins with an earlier
        text completion's prompt and reply, that call's ids followed by the rest's; else the
        text tokenised whole (with the tokenizer's special tokens, as servers do)."""
        if not isinstance(prompt, str):
            return list(prompt)
        for call in reversed(earlier):
            if call.messages[:1] and call.messages[0].get("role") == TEXT_PROMPT:
                head = call.messages[0]["content"] + (call.reply.get("content") or "")
                if prompt.startswith(head):
                    return call.ids + self.tokenizer(prompt[len(head):], add_special_tokens=False)["input_ids"]
        return self.tokenizer(prompt, add_special_tokens=True)["input_ids"]
