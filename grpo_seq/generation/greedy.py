"""Greedy completions of a list of prompts with ``model.generate``, for evaluation."""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from ..io.models import prepare_tokenizer
from .prompts import prompt_texts

__all__ = ["greedy_completions"]


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
