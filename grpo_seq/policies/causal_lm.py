"""A Hugging Face causal language model as a GRPO policy: completion tokens are its tokens."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor, nn

from ..batch import RolloutBatch
from ..objective import token_entropy, token_logprobs

__all__ = ["CausalLMPolicy"]


class CausalLMPolicy(nn.Module):
    """Scores the completion tokens of a :class:`RolloutBatch` under a causal LM.

    The batch's ``context`` holds left-padded prompt ids with ``extras["prompt_mask"]``;
    ``tokens`` holds the right-padded completions. Only the completion positions go through
    the LM head (``logits_to_keep``), so full-vocabulary logits are never built for the prompt.

    Args:
        model: a ``transformers`` causal LM, or a peft model wrapping one (LoRA): then the
            reference policy is this same model with its adapters disabled.
        tokenizer: saved beside the weights so a saved policy loads on its own.
    """

    def __init__(self, model: nn.Module, tokenizer=None):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer

    @property
    def has_adapters(self) -> bool:
        """True for a peft model: its reference is itself with the adapters disabled."""
        return hasattr(self.model, "disable_adapter") and hasattr(self.model, "peft_config")

    @contextlib.contextmanager
    def adapters_disabled(self) -> Iterator[None]:
        if not self.has_adapters:
            raise RuntimeError("adapters_disabled() needs a peft model; this policy has no adapters")
        with self.model.disable_adapter():
            yield

    def forward(self, batch: RolloutBatch, with_entropy: bool = True) -> tuple[Tensor, Tensor | None]:
        """Per-token log-probs (and entropies, when asked) ``(B, T)`` of the completion tokens.

        Columns that are padding in every row of this batch (prompt on the left, completion on
        the right) are cut before the forward pass, which matters for micro-batches; the
        outputs are padded back to ``T`` with zeros, which the mask excludes.
        """
        prompt, prompt_mask = batch.context, batch.extras["prompt_mask"]
        tokens, mask = batch.tokens, batch.mask
        B, T = tokens.shape
        keep = prompt_mask.any(0).nonzero()
        p0 = int(keep[0]) if len(keep) else prompt.shape[1]
        used = mask.any(0).nonzero()
        t_eff = int(used[-1]) + 1 if len(used) else 1
        prompt, prompt_mask, tokens = prompt[:, p0:], prompt_mask[:, p0:], tokens[:, :t_eff]

        input_ids = torch.cat([prompt, tokens], dim=1)
        attention_mask = torch.cat([prompt_mask.long(), torch.ones_like(tokens)], dim=1)
        # Left padding shifts positions; generate() counts them from the attention mask, so
        # scoring must too or log-probs would not match sampling.
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        # Logits at position i predict token i + 1: the last t_eff + 1 positions, minus the last.
        logits = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
            logits_to_keep=t_eff + 1, use_cache=False,
        ).logits[:, :-1]
        logp = token_logprobs(logits, tokens)
        entropy = None
        if with_entropy:
            with torch.no_grad():
                entropy = torch.cat([token_entropy(chunk) for chunk in logits.detach().split(8, dim=1)], dim=1)
        pad = T - t_eff
        if pad:
            logp = nn.functional.pad(logp, (0, pad))
            entropy = nn.functional.pad(entropy, (0, pad)) if entropy is not None else None
        return logp, entropy

    @torch.no_grad()
    def generate(self, input_ids: Tensor, attention_mask: Tensor, **generation_kwargs) -> Tensor:
        """``model.generate`` (prompt followed by the new tokens)."""
        return self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **generation_kwargs)

    def save_to(self, directory: str | Path, merged: bool = True) -> None:
        """``save_pretrained`` into ``directory`` (with the tokenizer).

        With LoRA, ``merged=True`` writes the base model with the adapters merged in (loads
        anywhere, no peft needed) and the adapter alone under ``adapter/``; ``merged=False``
        writes the adapter only.
        """
        directory = Path(directory)
        if self.has_adapters:
            self.model.save_pretrained(directory / "adapter" if merged else directory)
            if merged:
                copy.deepcopy(self.model).merge_and_unload().save_pretrained(directory)
        else:
            self.model.save_pretrained(directory)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(directory)
