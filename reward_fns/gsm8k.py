"""GSM8K: the prompt asking for a final answer line, and the rewards: answer correctness, answer
format, and DAPO's soft overlong punishment.

Every reward function has the signature ``fn(prompts, completions, **columns) -> list[float | None]``
(TRL's), one value per completion. The gold answer arrives as the dataset column ``answer``:
either a raw GSM8K solution ending in ``#### 1,234`` or a bare number string.

The model is expected to finish with a line ``#### <number>`` (GSM8K's own convention);
``\\boxed{<number>}`` is accepted as a fallback because instruction-tuned models often write it.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Callable, Sequence

from ._text import completion_text

# The prompt the GSM8K recipes give: the rewards below read the answer from its "#### <number>" line.
GSM8K_SYSTEM_PROMPT = (
    "Solve the math problem. Show your steps briefly, then give the final answer on its own line "
    "as '#### <number>'."
)
# Repeated after the question: SmolLM2-135M follows an instruction there more often than one in
# the system message alone (greedy, first 32 dev problems: 28% with a #### line against 19%).
GSM8K_INSTRUCTION = "The last line must be '#### <number>'."

# Commas only as thousands separators ("1,234,567"): "3,4" is a list, not 34.
_INT = r"(?:\d{1,3}(?:,\d{3})+|\d+)"
_NUMBER_RE = re.compile(rf"[+-]?(?:{_INT}(?:\.\d+)?|\.\d+|\d+/\d+)")
# LaTeX wrappers that leave the number inside unchanged.
_TEXT_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_HASH_LINE_RE = re.compile(r"^[ \t]*####[ \t]*(.*?)[ \t]*$", re.MULTILINE)


def normalize_number(s: str) -> str | None:
    """``s`` as a plain number string, or None when it is not a number.

    Strips whitespace, ``$``, a trailing ``.``, thousands commas, ``\\text{...}`` wrappers and
    LaTeX thin spaces; turns ``\\frac{a}{b}`` into ``a/b``. Accepted afterwards: integers,
    decimals, negatives and simple fractions ``a/b`` (``b != 0``). Units or words ("18 dollars")
    make it not a number: the format asks for the number alone.

    >>> normalize_number(" $1,234. ")
    '1234'
    """
    s = _TEXT_RE.sub(r"\1", s)
    s = _FRAC_RE.sub(r"\1/\2", s)
    s = s.replace("{,}", ",").replace("\\!", "").replace("\\,", "").replace("\\$", "$")
    s = s.replace("$", "").replace("\u2212", "-").strip()
    if s.endswith("."):
        s = s[:-1].rstrip()
    if not _NUMBER_RE.fullmatch(s):
        return None
    s = s.replace(",", "").lstrip("+")
    try:
        Fraction(s)
    except ZeroDivisionError:  # "3/0"
        return None
    return s


def _boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}``, braces matched so ``\\boxed{\\frac{3}{4}}`` is whole."""
    out = []
    start = text.find("\\boxed{")
    while start != -1:
        i = start + len("\\boxed{")
        depth = 1
        j = i
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth == 0:
            out.append(text[i : j - 1])
        start = text.find("\\boxed{", i)
    return out


def extract_answer(text: str) -> str | None:
    """The model's final answer in ``text``, normalised by :func:`normalize_number`, or None.

    The rest of the line after the last ``####``; if there is no ``####``, the content of the
    last ``\\boxed{...}``. None when neither is present or what follows is not a number (a
    ``####`` that is not followed by a number does not fall back to ``\\boxed``: the model did
    commit to that line).
    """
    idx = text.rfind("####")
    if idx != -1:
        return normalize_number(text[idx + 4 :].split("\n", 1)[0])
    boxed = _boxed_contents(text)
    return normalize_number(boxed[-1]) if boxed else None


def _gold_value(answer: Any) -> Fraction:
    """The gold number of a raw GSM8K answer ("...\\n#### 1,234") or a bare number."""
    s = answer if isinstance(answer, str) else str(answer)
    idx = s.rfind("####")
    num = normalize_number(s[idx + 4 :] if idx != -1 else s)
    if num is None:
        # A bad gold label would silently score every completion 0: stop instead.
        raise ValueError(f"gold answer {answer!r:.120} has no number after '####' and is not a number itself")
    return Fraction(num)


def correctness_reward(
    prompts: Sequence[Any] | None = None,
    completions: Sequence[Any] = (),
    answer: Sequence[Any] | None = None,
    **kwargs: Any,
) -> list[float]:
    """1.0 where the completion's :func:`extract_answer` equals the gold ``answer`` numerically
    ("18", "18.0", "$18" and "18." all equal 18; "1,800" equals 1800), else 0.0 (also when no
    answer can be extracted).

    Raises:
        ValueError: no ``answer`` column, one of another length, or a gold answer that is not a number.
    """
    if answer is None:
        raise ValueError("correctness_reward needs the gold answers as the dataset column 'answer'")
    if len(answer) != len(completions):
        raise ValueError(f"got {len(answer)} gold answers for {len(completions)} completions")
    rewards = []
    for completion, gold in zip(completions, answer):
        pred = extract_answer(completion_text(completion))
        rewards.append(1.0 if pred is not None and Fraction(pred) == _gold_value(gold) else 0.0)
    return rewards


def _check_gold_row(row: dict[str, Any]) -> None:
    """Raise ``ValueError`` for a dataset row whose gold answer :func:`correctness_reward` cannot
    read, so a bad label stops the run before its first step (``grpo_seq.scoring.rewards.check_rows``)."""
    if row.get("answer") is None:
        raise ValueError("no gold 'answer'")
    _gold_value(row["answer"])


correctness_reward.check_row = _check_gold_row  # type: ignore[attr-defined]


def format_reward(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any) -> list[float]:
    """How cleanly the completion gives its answer, after showing its working.

    - 1.0: exactly one ``####`` line, ``#### <number>``, it is the last non-empty line, and a
      line before it holds a number (the steps the prompt asks for);
    - 0.5: the same with text after the answer line; or no ``####`` line but a
      ``\\boxed{<number>}`` after some working;
    - 0.0: anything else: several ``####`` lines, or an answer with no working before it.

    Both zeros close a shortcut GRPO found in runs of recipes/gsm8k_tiny.py: a lenient check
    paid a model for repeating ``#### n`` until it was cut off (found within 30 steps), and a
    bare ``#### n`` line earned the full format reward, so SmolLM2-135M collapsed to answers
    like ``#### 5`` (5 tokens, accuracy 0) by step 20. ``<number>`` is anything
    :func:`normalize_number` accepts.
    """
    rewards = []
    for completion in completions:
        text = completion_text(completion)
        hash_lines = _HASH_LINE_RE.findall(text)
        lines = [line for line in text.strip().splitlines() if line.strip()]
        if len(hash_lines) == 1 and normalize_number(hash_lines[0]) is not None:
            at = next(i for i, line in enumerate(lines) if _HASH_LINE_RE.fullmatch(line))
            if not _shows_working(lines[:at]):
                rewards.append(0.0)
            else:
                rewards.append(1.0 if at == len(lines) - 1 else 0.5)
        elif not hash_lines and any(normalize_number(b) is not None for b in _boxed_contents(text)):
            rewards.append(0.5 if _shows_working([text[: text.rfind("\\boxed")]]) else 0.0)
        else:
            rewards.append(0.0)
    return rewards


def _shows_working(lines: Sequence[str]) -> bool:
    """Some text before the answer holds a number: a quantity or a calculation."""
    return any(ch.isdigit() for line in lines for ch in line)


def has_answer_line(completion: Any) -> bool:
    """True when some line is ``#### <number>``: the lenient format check of evaluations."""
    return any(normalize_number(m) is not None for m in _HASH_LINE_RE.findall(completion_text(completion)))


def overlong_penalty(max_length: int, buffer: int) -> Callable[..., list[float]]:
    """DAPO's soft overlong punishment, as a reward function over completion lengths in tokens.

    With ``L`` the completion's token count: 0 when ``L <= max_length - buffer``;
    ``(max_length - buffer - L) / buffer`` inside the buffer (falls linearly from 0 to -1);
    -1.0 when ``L >= max_length``. Penalising gradually, before truncation, tells the model that
    long answers are worse instead of only cutting them off.

    Args:
        max_length: the generation limit in tokens.
        buffer: length of the penalty ramp, in ``[1, max_length]``.

    Returns:
        A reward function named ``overlong_penalty`` that reads the keyword ``completion_ids``
        (one list of token ids per completion) and raises TypeError without it.
    """
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"overlong_penalty: max_length must be a positive int, got {max_length!r}")
    if isinstance(buffer, bool) or not isinstance(buffer, int) or not 1 <= buffer <= max_length:
        raise ValueError(f"overlong_penalty: buffer must be an int in [1, max_length={max_length}], got {buffer!r}")
    start = max_length - buffer

    def overlong_penalty(
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Sequence[Sequence[int]] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        if completion_ids is None:
            raise TypeError(
                "overlong_penalty needs the keyword argument completion_ids (the token ids of each "
                "completion); token counts cannot be recovered from text"
            )
        out = []
        for ids in completion_ids:
            n = len(ids)
            out.append(0.0 if n <= start else -1.0 if n >= max_length else (start - n) / buffer)
        return out

    overlong_penalty.__doc__ = (
        f"DAPO soft overlong penalty: 0 up to {start} tokens, falling linearly to -1 at {max_length}."
    )
    return overlong_penalty
