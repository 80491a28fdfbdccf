"""A stand-in policy for the sampler: each generate call returns the next scripted replies."""

from __future__ import annotations

import torch
from torch import nn


class ScriptedPolicy(nn.Module):
    """``turns[k][i]``: the text generated at call k for the i-th row of that call (the episodes
    still playing, in order); each character is a token of tiny_lm's tokenizer, ``$`` its EOS."""

    def __init__(self, tokenizer, turns: list[list[str]]):
        super().__init__()
        self.tokenizer, self.turns, self.calls = tokenizer, turns, 0
        self.weight = nn.Parameter(torch.zeros(1))

    def ids(self, text: str) -> list[int]:
        eos = self.tokenizer.eos_token_id
        return [eos if c == "$" else self.tokenizer.convert_tokens_to_ids(c) for c in text]

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, **kwargs):
        replies = [self.ids(t)[:max_new_tokens] for t in self.turns[self.calls]]
        self.calls += 1
        width = max(len(r) for r in replies)
        new = torch.tensor([r + [pad_token_id] * (width - len(r)) for r in replies])
        return torch.cat([input_ids, new], dim=1)
