"""The texts a model is prompted with, and a check, before anything is generated, that they fit
its context: a prompt too long fails at once, naming its row, instead of mid-run."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..errors import UsageError

__all__ = ["prompt_texts", "check_prompt_lengths"]


def prompt_texts(tokenizer, prompts: Sequence[Any]) -> tuple[list[str], bool]:
    """The texts a model sees for ``prompts`` (chat messages through the chat template, strings
    as they are) and whether the tokenizer should add its special tokens (plain strings only)."""
    texts = [p if isinstance(p, str) else tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
             for p in prompts]
    return texts, not prompts or isinstance(prompts[0], str)


def check_prompt_lengths(tokenizer, prompts: Sequence[Any], max_new_tokens: int, context: int | None,
                         places: Callable[[int], str]) -> None:
    """Refuse, before anything is generated, a prompt whose tokens plus ``max_new_tokens``
    exceed the model's ``context``, naming its row (``places(i)``)."""
    if context is None:
        return
    texts, special = prompt_texts(tokenizer, prompts)
    for s in range(0, len(texts), 1024):
        lengths = [len(ids) for ids in tokenizer(texts[s : s + 1024], add_special_tokens=special)["input_ids"]]
        for i, n in enumerate(lengths, start=s):
            if n + max_new_tokens > context:
                raise UsageError(
                    f"{places(i)}: the prompt is {n} tokens, and with {max_new_tokens} new tokens that exceeds the "
                    f"model's context of {context}; shorten or drop the row, or lower the completion length"
                )
