"""A multi-turn conversation as token ids, through the model's chat template.

The conversation is built by appending ids, never by re-tokenising the whole text: the ids the
model generated are the ids it is trained on, and the log-probs it is scored with are those it
sampled with. What the template puts between turns is found once, by rendering a conversation of
placeholders:

    render([user U, assistant R])                        = ... R <close>
    render([user U, assistant R, user O], generation)    = ... R <close> <head> O <tail>

so that after a reply the environment's answer ``O`` arrives as ``<close> <head> O <tail>``
(``<close>`` without the end-of-turn token the reply itself ended with). A tokenizer without a
chat template gets plain text: the prompt, each reply, then ``\\n O \\n``.

An environment may answer with chat messages of its own instead (a tool's result: ``{"role":
"tool", "name": ..., "content": ...}``); their ids are the template's rendering of them after an
assistant turn that called a tool, as TRL finds them (:meth:`ChatFormat.messages_ids`).
"""

from __future__ import annotations

from typing import Any

from ...errors import UsageError

__all__ = ["ChatFormat"]

_REPLY, _OBS = "<<grpo-seq reply>>", "<<grpo-seq observation>>"


class ChatFormat:
    """How a text environment's conversation becomes tokens for ``tokenizer``.

    Args:
        tokenizer: the policy's tokenizer; with a chat template, the prompt is a user message
            (after ``system_prompt`` when given) and each observation the next user message.
        system_prompt: the system message before the first prompt ('' for none).
        tools: functions the template renders into the prompt (``apply_chat_template(tools=...)``).
        instruction: appended on a new line to a string prompt and to every observation ('' for
            none): a reminder of the reply's format at each turn, where a small model follows it
            better than a system message read once.
    """

    def __init__(self, tokenizer: Any, system_prompt: str = "", tools: list[Any] | None = None, instruction: str = ""):
        self.tokenizer = tokenizer
        self.suffix = f"\n{instruction}" if instruction else ""
        self.tools = {"tools": list(tools)} if tools else {}
        self.system = [{"role": "system", "content": system_prompt}] if system_prompt else []
        self.chat = getattr(tokenizer, "chat_template", None) is not None
        self.eos_text = tokenizer.eos_token or ""
        self.close, self.head, self.tail = self._glue() if self.chat else ("", "\n", "\n")

    def _render(self, messages: list[dict[str, str]], generation: bool) -> str:
        return self.tokenizer.apply_chat_template(self.system + messages, tokenize=False,
                                                  add_generation_prompt=generation, **self.tools)

    def _glue(self) -> tuple[str, str, str]:
        """``(close, head, tail)`` of the template, from a conversation of placeholders."""
        turn = [{"role": "user", "content": "U"}, {"role": "assistant", "content": _REPLY}]
        before = self._render(turn, generation=False)
        after = self._render(turn + [{"role": "user", "content": _OBS}], generation=True)
        if not after.startswith(before) or _REPLY not in before or after.count(_OBS) != 1:
            raise UsageError("the tokenizer's chat template renders a conversation's earlier turns differently once "
                             "a turn is added, so a conversation cannot grow turn by turn; use a model whose "
                             "template appends turns (or a tokenizer without a chat template)")
        close = before[before.rindex(_REPLY) + len(_REPLY):]
        head, tail = after[len(before):].split(_OBS)
        return close, head, tail

    def _ids(self, text: str, special: bool = False) -> list[int]:
        return self.tokenizer(text, add_special_tokens=special)["input_ids"]

    def prompt_text(self, prompt: str | list[dict[str, Any]]) -> str:
        """The text the model sees first: the prompt as a user message, or a list of chat messages
        as they are (with the generation prompt)."""
        if isinstance(prompt, list):
            return self._render(prompt, generation=True)
        prompt += self.suffix
        return self._render([{"role": "user", "content": prompt}], generation=True) if self.chat else prompt

    def prompt_ids(self, prompt: str | list[dict[str, Any]]) -> list[int]:
        """:meth:`prompt_text` as ids (a plain prompt gets the tokenizer's special tokens)."""
        return self._ids(self.prompt_text(prompt), special=not self.chat)

    def observation_ids(self, observation: str, reply_ended: bool) -> list[int]:
        """The ids that follow a reply: the template closing the reply's turn (less the end-of-turn
        token when the reply ended with it, ``reply_ended``), then ``observation`` as the next user
        message and the generation prompt."""
        close = self.close
        if reply_ended and self.eos_text and close.startswith(self.eos_text):
            close = close[len(self.eos_text):]
        return self._ids(close + self.head + observation + self.suffix + self.tail)

    def messages_ids(self, messages: list[dict[str, Any]], reply_ended: bool) -> list[int]:
        """The ids that follow a reply that called a tool when the environment answers with chat
        ``messages`` (tool results): the template closing the reply's turn, the messages, the
        generation prompt. Found as TRL finds them: ``messages`` rendered after an assistant turn
        with a tool call, less that turn (up to its end-of-turn token)."""
        call = [{"type": "function", "function": {"name": messages[0].get("name", "tool"), "arguments": {}}}]
        turn = [{"role": "user", "content": "U"}, {"role": "assistant", "content": _REPLY, "tool_calls": call}]
        before = self._render(turn, generation=False)
        after = self._render(turn + messages, generation=True)
        if not after.startswith(before):
            raise UsageError("the tokenizer's chat template renders a conversation's earlier turns differently once a "
                             "tool's result is added, so a conversation cannot grow turn by turn")
        end = before.rfind(self.eos_text) if self.eos_text else -1
        close = before[end:] if end > before.rindex(_REPLY) else self.close
        if reply_ended and self.eos_text and close.startswith(self.eos_text):
            close = close[len(self.eos_text):]
        return self._ids(close + after[len(before):])
