"""Prompt datasets: a hub id or a local JSONL, turned into chat prompts with a gold answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from .models import prepare_tokenizer

__all__ = ["load_rows", "chat_prompts", "greedy_completions"]


def load_rows(dataset: str, split: str = "train", config: str | None = None):
    """A ``datasets.Dataset`` from a local ``.json``/``.jsonl`` file or a hub id (``owner/name``)."""
    from datasets import load_dataset

    path = Path(dataset).expanduser()
    if path.suffix in (".json", ".jsonl"):
        if not path.is_file():
            raise FileNotFoundError(f"--dataset {dataset}: no such file")
        return load_dataset("json", data_files=str(path), split="train")
    if path.exists():
        raise ValueError(f"--dataset {dataset}: a local dataset must be a .jsonl (or .json) file")
    return load_dataset(dataset, config, split=split)


def chat_prompts(
    rows, question_column: str = "question", answer_column: str = "answer", system_prompt: str | None = None,
    instruction: str | None = None, source: str = "dataset",
):
    """Rows with ``prompt`` (system + user chat messages) and ``answer``, for the sampler and rewards.

    The user message is the question, followed by ``instruction`` on a new line when given.

    Raises a ``ValueError`` naming ``source`` and the missing column, or the first empty question.
    """
    columns = set(rows.column_names if hasattr(rows, "column_names") else rows[0])
    for col in (question_column, answer_column):
        if col not in columns:
            raise ValueError(f"{source}: no {col!r} column (columns: {sorted(columns)})")

    def to_prompt(row: dict[str, Any]) -> dict[str, Any]:
        question = row[question_column]
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"{source}: empty {question_column!r} in row {row!r}")
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        user = f"{question}\n{instruction}" if instruction else question
        return {"prompt": messages + [{"role": "user", "content": user}], "answer": row[answer_column]}

    if hasattr(rows, "map"):
        return rows.map(to_prompt, remove_columns=rows.column_names)
    return [to_prompt(r) for r in rows]


@torch.no_grad()
def greedy_completions(
    model, tokenizer, prompts: list, max_new_tokens: int = 256, batch_size: int = 16, progress: bool = True
) -> list[str]:
    """Greedy completions of chat (or plain-text) prompts, batched, in the prompts' order.

    Prompts are sorted by length before batching so that a batch pads little.
    """
    texts = [p if isinstance(p, str) else tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
             for p in prompts]
    special = not prompts or isinstance(prompts[0], str)
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
