"""The text of a completion, whether it arrives as a string or as chat messages."""

from __future__ import annotations

from typing import Any

__all__ = ["completion_text"]


def completion_text(completion: Any) -> str:
    """The text of one completion.

    Args:
        completion: a ``str``, or a conversational completion: a list of messages
            ``[{"role": "assistant", "content": "..."}]`` (the last message is the model's
            answer), or a single message dict. A message's ``content`` may itself be a list of
            content parts ``[{"type": "text", "text": "..."}]``; their texts are joined.

    Raises:
        TypeError: for anything else, so a reward function never scores ``repr(obj)``.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        if not completion:
            return ""
        last = completion[-1]
        if isinstance(last, dict):
            return _content_text(last.get("content"))
    raise TypeError(
        f"a completion must be a str or a list of messages like [{{'role': 'assistant', 'content': '...'}}], "
        f"got {type(completion).__name__}: {completion!r:.80}"
    )


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        # Multimodal-style content parts: keep the text ones.
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    raise TypeError(f"message content must be a str or a list of content parts, got {type(content).__name__}")
