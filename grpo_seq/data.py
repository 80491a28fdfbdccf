"""Prompt datasets: a hub id or a local JSONL, turned into chat prompts with a gold answer.

Every row is read and checked before training or evaluation starts, and an error names the
file and line (or the hub dataset's row) instead of stopping the run at the step that first
uses the row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from tqdm.auto import tqdm

from .errors import MissingPathError, UsageError
from .models import prepare_tokenizer

__all__ = ["Rows", "load_rows", "read_json_rows", "chat_prompts", "row_place", "check_prompt_lengths",
           "greedy_completions"]


class Rows(list):
    """A list of dataset rows that remembers where each came from (``FILE line N``), for messages."""

    def __init__(self, rows: Sequence[dict[str, Any]], places: Sequence[str]):
        super().__init__(rows)
        self.places = list(places)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Rows(list.__getitem__(self, i), self.places[i])
        return list.__getitem__(self, i)


def row_place(rows: Any, i: int, source: str = "dataset") -> str:
    """Where row ``i`` of ``rows`` came from: its file and line for :class:`Rows`, else ``source row i+1``."""
    return rows.places[i] if isinstance(rows, Rows) else f"{source} row {i + 1}"


def read_json_rows(path: str | Path) -> Rows:
    """The rows of a JSONL file (one JSON object a line; blank lines skipped) or of a ``.json``
    file holding a list of objects. An empty file, a line that is not valid JSON or not an
    object is a :class:`UsageError` naming the file and line."""
    path = Path(path)
    text = path.read_text()
    if not text.strip():
        raise UsageError(f"{path}: the file is empty; a dataset needs at least one row (one JSON object a line)")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise UsageError(f"{path} line {e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
        pairs = [(f"{path} item {i + 1}", item) for i, item in enumerate(items)]
    else:
        pairs = []
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                pairs.append((f"{path} line {n}", json.loads(line)))
            except json.JSONDecodeError as e:
                raise UsageError(f"{path} line {n}: not valid JSON ({e.msg}, column {e.colno}); each line must be "
                                 "one JSON object") from None
    for place, item in pairs:
        if not isinstance(item, dict):
            raise UsageError(f"{place}: expected a JSON object of column: value, got a {type(item).__name__}")
    if not pairs:
        raise UsageError(f"{path}: no rows (a JSON list with no objects)")
    return Rows([item for _, item in pairs], [place for place, _ in pairs])


def load_rows(dataset: str, split: str = "train", config: str | None = None):
    """The rows of a local ``.json``/``.jsonl`` file (:class:`Rows`, each parsed now; see
    :func:`read_json_rows`) or a hub dataset (a ``datasets.Dataset``)."""
    path = Path(dataset).expanduser()
    if path.suffix in (".json", ".jsonl"):
        if not path.is_file():
            raise MissingPathError(f"--dataset {dataset}: no such file")
        return read_json_rows(path)
    if path.exists():
        raise UsageError(f"--dataset {dataset}: a local dataset must be a .jsonl (or .json) file")
    from datasets import load_dataset

    try:
        return load_dataset(dataset, config, split=split)
    except (FileNotFoundError, ValueError, ConnectionError) as e:  # unknown id, config or split; offline
        raise UsageError(f"--dataset {dataset}: cannot load it from the hub ({type(e).__name__}: "
                         f"{' '.join(str(e).split())[:300]}); give a local .jsonl file or a hub id") from None


def chat_prompts(
    rows, question_column: str = "question", answer_column: str = "answer", system_prompt: str | None = None,
    instruction: str | None = None, source: str = "dataset",
) -> Rows:
    """Rows with ``prompt`` (system + user chat messages) and ``answer``, for the sampler and rewards.

    The user message is the question, followed by ``instruction`` on a new line when given.
    Every row is checked now. Raises a ``UsageError`` naming ``source`` and the missing column,
    or the row (file and line for :class:`Rows`) with an empty question or no answer.
    """
    if len(rows) == 0:
        raise UsageError(f"{source}: no rows")
    columns = set(rows.column_names if hasattr(rows, "column_names") else rows[0])
    for col in (question_column, answer_column):
        if col not in columns and not isinstance(rows, Rows):  # Rows: the row below is named by its line
            raise UsageError(f"{source}: no {col!r} column (columns: {sorted(columns)})")
    out, places = [], []
    for i, row in enumerate(rows):
        place = row_place(rows, i, source)
        for col in (question_column, answer_column):
            if col not in row:
                raise UsageError(f"{place}: no {col!r} column (this row has {sorted(row)})")
        question = row.get(question_column)
        if not isinstance(question, str) or not question.strip():
            raise UsageError(f"{place}: empty {question_column!r} in row {row!r:.200}")
        if row.get(answer_column) is None:
            raise UsageError(f"{place}: no {answer_column!r} in row {row!r:.200}")
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        user = f"{question}\n{instruction}" if instruction else question
        out.append({"prompt": messages + [{"role": "user", "content": user}], "answer": row[answer_column]})
        places.append(place)
    return Rows(out, places)


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


@torch.no_grad()
def greedy_completions(
    model, tokenizer, prompts: list, max_new_tokens: int = 256, batch_size: int = 16, progress: bool = True
) -> list[str]:
    """Greedy completions of chat (or plain-text) prompts, batched, in the prompts' order.

    Prompts are sorted by length before batching so that a batch pads little.
    """
    texts, special = prompt_texts(tokenizer, prompts)
    lengths = [len(tokenizer(t, add_special_tokens=special)["input_ids"]) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    device = next(model.parameters()).device
    out: list[str] = [""] * len(texts)
    prepare_tokenizer(tokenizer)
    for s in tqdm(range(0, len(order), batch_size), desc="generating", unit="batch", disable=not progress):
        idx = order[s : s + batch_size]
        enc = tokenizer([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=special).to(device)
        gen = model.generate(
            **enc, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id, temperature=None, top_p=None, top_k=None,
        )[:, enc["input_ids"].shape[1]:]
        for i, row in zip(idx, tokenizer.batch_decode(gen, skip_special_tokens=True)):
            out[i] = row
    return out
