"""Prompt datasets in TRL's formats, from any file or folder a user is likely to hold: the one
place that reads them.

A row has a ``prompt``: a string (TRL's standard format) or a list of chat messages
(``{"role": ..., "content": ...}``, TRL's conversational format). Every other column reaches the
reward functions as a keyword argument of the same name, as in TRL. Other layouts name their
columns: ``prompt_column="question"`` (a string column) and ``answer_column``
(passed to reward functions as ``answer``).

:func:`read_rows` reads JSONL, JSON, parquet, CSV, a folder written by ``save_to_disk`` or a hub
id; :func:`prompt_rows` checks every row before the model loads, naming the file and row
(:class:`Rows` remember where each row came from). :func:`chat_prompts` turns question/answer
rows into chat prompts with a gold answer.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Sequence

from ..errors import MissingPathError, UsageError
from .rows import Rows, row_place

__all__ = [
    "Rows", "row_place", "read_json_rows", "read_utf8", "read_rows", "prompt_rows", "chat_prompts", "check_prompt", "FILE_FORMATS",
]

FILE_FORMATS = (".jsonl", ".json", ".parquet", ".csv")


def read_json_rows(path: str | Path) -> Rows:
    """The rows of a JSONL file (one JSON object a line; blank lines skipped) or of a ``.json``
    file holding a list of objects. An empty file, a line that is not valid JSON or not an
    object is a :class:`UsageError` naming the file and line."""
    path = Path(path)
    text = read_utf8(path)
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


def read_utf8(path: Path) -> str:
    """The text of ``path``, decoded as UTF-8 whatever the locale (JSON's encoding, and what
    ``datasets`` writes). A byte that is not UTF-8 (a file saved as Latin-1 or cp1252, a damaged
    file) is a :class:`UsageError` naming the file, the line, the byte offset and the bytes
    found, rather than a ``UnicodeDecodeError`` traceback that names none of them."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - data.rfind(b"\n", 0, e.start)
        found = " ".join(f"0x{b:02x}" for b in data[e.start:e.end])
        raise UsageError(f"{path} line {line}: not UTF-8: byte {found} at byte offset {e.start} (column {column}, "
                         f"{e.reason}); save the file as UTF-8 (e.g. iconv -f cp1252 -t utf-8)") from None


def read_rows(dataset: Any, split: str = "train", config: str | None = None) -> Rows:
    """Every row of ``dataset``, each remembering where it came from (``FILE line N`` / ``row N``).

    ``dataset``: a ``.jsonl``/``.json``/``.parquet``/``.csv`` file, a folder written by
    ``datasets``' ``save_to_disk`` (a ``DatasetDict`` gives its ``split``), a hub id, a generated
    task ``reasoning_gym:TASK`` (``config``: its options as JSON; :mod:`grpo_seq.io.sources.reasoning_gym`),
    a verifiers environment's tasks ``verifiers:TASKSET`` (:mod:`grpo_seq.io.sources.verifiers`),
    or rows already in memory (a ``datasets.Dataset`` or a list of dicts)."""
    if not isinstance(dataset, (str, Path)):
        return _in_memory(dataset, "train_dataset")
    if isinstance(dataset, str) and dataset.startswith("reasoning_gym:"):  # a generated task: grpo_seq.io.sources
        from .sources.reasoning_gym import reasoning_gym_rows

        return reasoning_gym_rows(dataset, split, config)
    if isinstance(dataset, str) and dataset.startswith("verifiers:"):  # a verifiers environment's tasks
        from .sources.verifiers import verifiers_rows

        return verifiers_rows(dataset, split, config)
    path = Path(dataset).expanduser()
    flag = f"--dataset {dataset}"
    if path.suffix in FILE_FORMATS:
        if not path.is_file():
            raise MissingPathError(f"{flag}: no such file")
        if path.suffix in (".json", ".jsonl"):
            return read_json_rows(path)
        return _read_parquet(path) if path.suffix == ".parquet" else _read_csv(path)
    if path.is_dir():
        return _read_saved(path, split, flag)
    if path.exists() or str(dataset).startswith((".", "/", "~")):
        raise UsageError(f"{flag}: not a dataset; give a {', '.join(FILE_FORMATS)} file, a folder written by "
                         "save_to_disk, or a hub id")
    return _in_memory(_from_hub(str(dataset), split, config, flag), f"{flag} (split {split})")


def _in_memory(rows: Any, source: str) -> Rows:
    if isinstance(rows, Rows):
        return rows
    if hasattr(rows, "to_list"):  # a datasets.Dataset: plain dicts, read once
        rows = rows.to_list()
    rows = list(rows)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise UsageError(f"{source} row {i + 1}: expected a mapping of column: value, got a {type(row).__name__}")
    return Rows(rows, [f"{source} row {i + 1}" for i in range(len(rows))])


def _read_parquet(path: Path) -> Rows:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow's errors for a damaged or foreign file
        raise UsageError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from None
    return Rows(rows, [f"{path} row {i + 1}" for i in range(len(rows))])


def _read_csv(path: Path) -> Rows:
    with io.StringIO(read_utf8(path), newline="") as f:
        reader = csv.DictReader(f)
        rows, places = [], []
        for row in reader:
            if None in row:  # more cells than the header names
                raise UsageError(f"{path} line {reader.line_num}: more values than the header's "
                                 f"{len(reader.fieldnames or [])} columns")
            rows.append(row)
            places.append(f"{path} line {reader.line_num}")
    if not rows:
        raise UsageError(f"{path}: no rows (a CSV file needs a header line and at least one row)")
    return Rows(rows, places)


def _read_saved(path: Path, split: str, flag: str) -> Rows:
    if not any((path / name).is_file() for name in ("dataset_info.json", "state.json", "dataset_dict.json")):
        raise UsageError(f"{flag}: the folder holds no dataset written by save_to_disk; give such a folder or a "
                         f"{', '.join(FILE_FORMATS)} file")
    from datasets import load_from_disk

    ds = load_from_disk(str(path))
    if hasattr(ds, "keys"):  # a DatasetDict
        if split not in ds:
            raise UsageError(f"{flag}: no split {split!r} (splits: {sorted(ds.keys())}); name one with --dataset_split")
        ds = ds[split]
    return _in_memory(ds, f"{path}")


def _hub_unreachable() -> str | None:
    """Why the hub cannot be reached (its host has no address: no network), else None. Asked
    before loading, so that a machine without a network gets one line at once instead of the hub
    client's retries; in offline mode (``HF_HUB_OFFLINE``) the cache answers and nothing is asked."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return None
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError as e:
        return f"{host}: {e.strerror or e}"
    return None


def _from_hub(dataset: str, split: str, config: str | None, flag: str) -> Any:
    from datasets import load_dataset

    unreachable = _hub_unreachable()
    if unreachable:
        raise UsageError(f"{flag}: {dataset} is read from the hub, which cannot be reached ({unreachable}); without "
                         "a network give a local copy: --dataset path/to/file.jsonl (or .json, .parquet, .csv, a "
                         "save_to_disk folder)")
    try:
        return load_dataset(dataset, config or None, split=split)
    except (FileNotFoundError, ValueError, ConnectionError) as e:  # unknown id, config or split; offline
        raise UsageError(f"{flag}: cannot load it from the hub ({type(e).__name__}: "
                         f"{' '.join(str(e).split())[:300]}); give a local file or folder, or a hub id") from None


def check_prompt(prompt: Any, place: str, column: str) -> None:
    """Refuse a prompt that is neither a non-empty string nor a non-empty list of chat messages."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise UsageError(f"{place}: empty {column!r}")
        return
    if not isinstance(prompt, list) or not prompt:
        raise UsageError(f"{place}: {column!r} must be a string or a list of chat messages "
                         f"({{'role': ..., 'content': ...}}), got {prompt!r:.120}")
    for m in prompt:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise UsageError(f"{place}: each message of {column!r} needs a string 'role' and 'content', got {m!r:.120}")


def _pick_prompt_column(columns: Sequence[str], source: str) -> str:
    for name in ("prompt", "question"):  # TRL's format, then the question/answer layout
        if name in columns:
            return name
    raise UsageError(f"{source}: no 'prompt' column (TRL's format) and no 'question' column (the question/answer "
                     f"layout); the first row has {sorted(columns)}: name the prompt's column with --prompt_column")


def prompt_rows(
    rows: Rows, prompt_column: str | None = None, answer_column: str | None = None, system_prompt: str = "",
    instruction: str = "", as_chat: bool = False, keep_columns: bool = True, source: str = "dataset",
) -> Rows:
    """Rows with a ``prompt`` (the sampler's) and the other columns, every row checked now.

    ``prompt_column`` None: ``prompt``, else ``question``. ``answer_column``: a column every row
    must fill, given to reward functions as ``answer``. A string prompt becomes a chat (``system``
    message, then the user's prompt with ``instruction`` on a new line) when ``as_chat`` or
    either text is given; a conversational prompt gets the system message in front when it has
    none. ``keep_columns`` False keeps only ``prompt`` (and ``answer``) for the reward functions.
    Raises :class:`UsageError` naming ``source``'s file and row (line) for any bad row.
    """
    if len(rows) == 0:
        raise UsageError(f"{source}: no rows")
    column = prompt_column or _pick_prompt_column(list(rows[0]), source)
    out, places = [], []
    for i, row in enumerate(rows):
        place = row_place(rows, i, source)
        for col in (column, answer_column):
            if col is not None and col not in row:
                raise UsageError(f"{place}: no {col!r} column (this row has {sorted(row)})")
        check_prompt(row[column], place, column)
        if answer_column is not None and (row[answer_column] is None or str(row[answer_column]).strip() == ""):
            raise UsageError(f"{place}: no {answer_column!r} in row {row!r:.200}")
        new = {k: v for k, v in row.items() if k not in (column, answer_column)} if keep_columns else {}
        new["prompt"] = _as_prompt(row[column], system_prompt, instruction, as_chat)
        if answer_column is not None:
            new["answer"] = row[answer_column]
        out.append(new)
        places.append(place)
    return Rows(out, places)


def _as_prompt(prompt: str | list, system_prompt: str, instruction: str, as_chat: bool) -> str | list:
    if isinstance(prompt, list):
        has_system = any(m["role"] == "system" for m in prompt)
        return prompt if has_system or not system_prompt else [{"role": "system", "content": system_prompt}, *prompt]
    user = f"{prompt}\n{instruction}" if instruction else prompt
    if not (as_chat or system_prompt or instruction):
        return user
    return ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [{"role": "user", "content": user}]


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
        prompt = _as_prompt(question, system_prompt or "", instruction or "", as_chat=True)
        out.append({"prompt": prompt, "answer": row[answer_column]})
        places.append(place)
    return Rows(out, places)
