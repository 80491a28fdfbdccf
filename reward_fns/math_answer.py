"""Correctness of a math answer, checked by math-verify (the optional extra ``math``:
``pip install -e ".[math]"``).

math-verify (Hugging Face's answer checker, behind TRL's and open-r1's accuracy rewards) finds the
final answer in a text and decides whether it equals the gold one: ``\\boxed{3/4}`` equals
``0.75``, ``\\frac{3}{4}`` and ``$0.75$``; ``1,234`` equals ``1234``; ``18 dollars`` and
``5\\text{ cm}`` are 18 and 5; sets, intervals and symbolic expressions compare as sympy
objects. :func:`math_correctness` gives it the text to read; the parsing and the comparison are
all math-verify's, so the reward and an evaluation with math-verify agree by construction.

What it is given to read, and why:

- a completion with a ``####`` line (GSM8K's convention): the rest of the last such line, whatever
  it holds, so the answer the model committed to is the one scored (as in
  :func:`reward_fns.gsm8k.extract_answer`; a number after it in the text does not count);
- any other completion: the whole text, with an anchor required (``\\boxed{...}``, "the final
  answer is ...", "answer: ..."), as TRL's accuracy reward does: a bare number anywhere in the
  working is not an answer, else listing numbers would be paid;
- the gold ``answer``: a worked solution (``... #### 18``, or text with ``\\boxed{}`` or ``$...$``)
  is read the same way; an answer alone (``18``, ``\\frac{\\pi}{2}``, ``(1, 2)``: MATH's answer
  column) is read as one whole expression.

Timeouts: math-verify bounds each parse and comparison with ``signal.alarm``, which works only in
a process's main thread (elsewhere it raises ``ValueError``). The trainer scores in the main
thread, where the 5-second limit applies; called from another thread, the reward runs without a
limit instead of failing (the text read is then capped at :data:`MAX_CHARS` characters).
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Sequence

from ._text import completion_text

__all__ = ["math_correctness", "final_answer", "gold_answer", "MAX_CHARS", "TIMEOUT_S"]

TIMEOUT_S = 5  # seconds per parse and per comparison, in the main thread (math-verify's default)
MAX_CHARS = 4000  # the tail of a completion read without a timeout (outside the main thread)


def _math_verify() -> Any:
    """The ``math_verify`` module, or one line saying which extra installs it."""
    try:
        import math_verify
    except ImportError:
        from grpo_seq.errors import UsageError

        raise UsageError("math_correctness needs math-verify: pip install -e \".[math]\" (or pip install math-verify)") from None
    return math_verify


def _timeout() -> int | None:
    """math-verify's signal-based timeout where it works (the main thread), else none."""
    return TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


@functools.lru_cache(maxsize=1)
def _anchored_config() -> tuple:
    """Completions without a ``####`` line: an answer needs an anchor (TRL's accuracy reward's settings)."""
    mv = _math_verify()
    norm = mv.LatexNormalizationConfig(basic_latex=True, units=True, malformed_operators=False, nits=False, boxed="all")
    return (mv.LatexExtractionConfig(normalization_config=norm, boxed_match_priority=0, try_extract_without_anchor=False),
            mv.ExprExtractionConfig(try_extract_without_anchor=False))


def _parse(text: str, anchored: bool = False) -> list:
    mv = _math_verify()
    timeout = _timeout()
    if timeout is None:
        text = text[-MAX_CHARS:]
    if anchored:
        return mv.parse(text, extraction_config=list(_anchored_config()), parsing_timeout=timeout)
    return mv.parse(text, parsing_timeout=timeout)


def _hash_line(text: str) -> str | None:
    """The rest of the line after the last ``####`` (GSM8K's answer line), or None without one."""
    idx = text.rfind("####")
    return None if idx == -1 else text[idx + 4:].split("\n", 1)[0]


def final_answer(text: str) -> list:
    """math-verify's reading of the final answer in a completion's ``text`` (``[]``: none found):
    after its last ``####`` when it has one, else an anchored answer (``\\boxed{}``, "the answer is")."""
    line = _hash_line(text)
    return _parse(line) if line is not None else _parse(text, anchored=True)


@functools.lru_cache(maxsize=4096)
def _gold_cached(text: str) -> tuple:
    line = _hash_line(text)
    if line is not None:
        return tuple(_parse(line))
    if any(mark in text for mark in ("\\boxed", "$", "\\(", "\\[")):
        return tuple(_parse(text))
    return tuple(_parse(f"\\boxed{{{text}}}") or _parse(text))


def gold_answer(answer: Any) -> list:
    """math-verify's reading of a gold ``answer`` (a worked solution or the answer alone).

    Raises:
        ValueError: it holds no answer math-verify can read (a bad label would score every completion 0).
    """
    parsed = list(_gold_cached(str(answer).strip()))
    if not parsed:
        raise ValueError(f"gold answer {answer!r:.120} holds no answer math-verify can read")
    return parsed


def math_correctness(
    prompts: Sequence[Any] | None = None,
    completions: Sequence[Any] = (),
    answer: Sequence[Any] | None = None,
    **kwargs: Any,
) -> list[float]:
    """1.0 where math-verify finds the completion's final answer (:func:`final_answer`) equal to the
    gold ``answer`` column (:func:`gold_answer`), else 0.0 (also when it finds no answer).

    Raises:
        ValueError: no ``answer`` column, one of another length, or a gold answer math-verify cannot read.
    """
    if answer is None:
        raise ValueError("math_correctness needs the gold answers as the dataset column 'answer'")
    if len(answer) != len(completions):
        raise ValueError(f"got {len(answer)} gold answers for {len(completions)} completions")
    mv = _math_verify()
    rewards = []
    for completion, gold in zip(completions, answer):
        pred = final_answer(completion_text(completion))
        ok = bool(pred) and mv.verify(gold_answer(gold), pred, timeout_seconds=_timeout())
        rewards.append(1.0 if ok else 0.0)
    return rewards


def _check_gold_row(row: dict[str, Any]) -> None:
    """Raise ``ValueError`` for a row whose gold answer cannot be read, before the first step
    (``grpo_seq.scoring.rewards.check_rows``)."""
    if row.get("answer") is None:
        raise ValueError("no gold 'answer'")
    gold_answer(row["answer"])


math_correctness.check_row = _check_gold_row  # type: ignore[attr-defined]
