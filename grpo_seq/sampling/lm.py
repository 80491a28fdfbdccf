"""G completions per prompt from a transformers causal LM, all prompts of a step in one call."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from ..math.batch import RolloutBatch, TextSamples
from ..generation.prompts import check_prompt_lengths
from ..io.models import prepare_tokenizer
from ..io.prompt_data import row_place

__all__ = ["LMGroupSampler", "completion_mask", "text_batch"]


def completion_mask(tokens: torch.Tensor, eos_ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mask, truncated)`` of generated tokens ``(B, T)``.

    A completion ends at its first EOS, which counts (the model chose to stop); whatever
    follows never counts. A row with no EOS was cut off at the length limit: ``truncated``.
    """
    is_eos = torch.isin(tokens, torch.as_tensor(list(eos_ids), device=tokens.device))
    truncated = ~is_eos.any(-1)
    first = torch.where(truncated, tokens.shape[1] - 1, is_eos.int().argmax(-1))
    mask = torch.arange(tokens.shape[1], device=tokens.device)[None, :] <= first[:, None]
    return mask, truncated


class LMGroupSampler:
    """Draws ``num_groups`` prompts per step and G sampled completions for each.

    Each row of ``dataset`` is a mapping with a ``prompt_column`` (a string, or a list of chat
    messages rendered with the tokenizer's chat template) and any other columns (a gold answer,
    ...), which reach the reward functions as keyword lists, one entry per completion.

    Prompts are visited in a seeded random order (or in dataset order with ``shuffle=False``),
    epoch after epoch; with several processes, each takes its own disjoint share of every
    step's prompts.

    Args:
        tokenizer: the policy's tokenizer (left padding and a pad token are set here).
        dataset: an indexable of rows (a ``datasets.Dataset`` or a list of dicts).
        num_groups: prompts per step on this process.
        num_generations: G, completions per prompt.
        max_completion_length: most new tokens per completion.
        temperature, top_p, top_k: sampling settings (top_k 0 disables it).
        generation_batch_size: prompts per ``generate`` call (0: all of the step's at once).
        seed: seeds the prompt order.
        shuffle: False visits the prompts in dataset order (for comparisons across systems).
        process_index, num_processes: this process's share of the prompts.
        max_context_length: prompt + completion limit (the model's context); a longer prompt is
            an error naming the row.
        sampler_logprobs: also keep each sampled token's float32 log-prob under the distribution
            that drew it (``batch.sampler_logp``), for importance sampling against a cheaper
            sampling copy; the policy's ``generate`` must take ``output_logprobs``.
    """

    def __init__(
        self,
        tokenizer,
        dataset: Sequence[dict[str, Any]],
        num_groups: int,
        num_generations: int,
        max_completion_length: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        prompt_column: str = "prompt",
        generation_batch_size: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        process_index: int = 0,
        num_processes: int = 1,
        max_context_length: int | None = None,
        sampler_logprobs: bool = False,
    ):
        if len(dataset) == 0:
            raise ValueError("LMGroupSampler: the dataset is empty")
        first = dataset[0]
        if prompt_column not in first:
            raise ValueError(
                f"LMGroupSampler: the dataset has no {prompt_column!r} column (columns: {sorted(first)}); "
                "map your data to a prompt column first"
            )
        if num_generations < 2:
            raise ValueError(f"LMGroupSampler: num_generations (G) must be >= 2, got {num_generations}")
        if not temperature > 0:
            raise ValueError(f"LMGroupSampler: temperature must be > 0, got {temperature}")
        self.tokenizer, self.dataset = tokenizer, dataset
        self.num_groups, self.num_generations = num_groups, num_generations
        self.max_completion_length = max_completion_length
        self.prompt_column = prompt_column
        self.generation_batch_size = generation_batch_size or num_groups
        # status(text): what sampling is doing now, for a progress display (None: nobody listens)
        self.status: Callable[[str], None] | None = None
        self.process_index, self.num_processes = process_index, num_processes
        self.max_context_length = max_context_length
        self.sampler_logprobs = sampler_logprobs
        self.sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": top_k}
        prepare_tokenizer(tokenizer)
        self.seed, self.epoch, self.shuffle = seed, 0, shuffle
        self._order: list[int] = []
        self.pool: list[int] | None = None  # the rows drawn from (None: all; a curriculum's stage: draw_from)
        self.stage: float | None = None
        # Every prompt now, not at the step that first draws it (which could be hours in).
        check_prompt_lengths(tokenizer, [row[prompt_column] for row in dataset], max_completion_length,
                             max_context_length, lambda i: row_place(dataset, i, "LMGroupSampler: dataset"))

    # -- prompt order -------------------------------------------------------------------------

    def _next_indices(self) -> list[int]:
        """This process's prompts for the next step; every process advances through the same order."""
        need = self.num_groups * self.num_processes
        pool = self.pool if self.pool is not None else range(len(self.dataset))
        while len(self._order) < need:
            if self.shuffle:
                self._order += [pool[i] for i in np.random.default_rng([self.seed, self.epoch]).permutation(len(pool))]
            else:
                self._order += list(pool)
            self.epoch += 1
        step, self._order = self._order[:need], self._order[need:]
        return step[self.process_index * self.num_groups : (self.process_index + 1) * self.num_groups]

    def draw_from(self, rows: Sequence[int], restart: bool = True, stage: float | None = None) -> None:
        """Draw the prompts from these rows only (a curriculum's ``stage``, logged with each step
        as ``curriculum/stage``); ``restart`` drops the order drawn so far, so the next step
        already comes from them (False: a resumed run's order, written for these rows, stands)."""
        self.pool, self.stage = list(rows), stage
        if restart:
            self._order, self.epoch = [], 0

    def render(self, prompt: str | list[dict[str, str]]) -> str:
        """The text the model sees: chat messages through the chat template, a string as is."""
        if isinstance(prompt, str):
            return prompt
        return self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)

    def state_dict(self) -> dict[str, Any]:
        """The position in the prompt order (JSON-able), for checkpoints."""
        return {"order": list(self._order), "epoch": self.epoch, "seed": self.seed, "dataset_size": len(self.dataset)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["dataset_size"] != len(self.dataset):
            raise ValueError(
                f"LMGroupSampler: the checkpoint was written for a dataset of {state['dataset_size']} prompts, "
                f"this one has {len(self.dataset)}; resume with the same --dataset"
            )
        self._order, self.epoch = list(state["order"]), int(state["epoch"])

    @property
    def eos_ids(self) -> list[int]:
        return [self.tokenizer.eos_token_id]

    # -- sampling -----------------------------------------------------------------------------

    def _progress(self, completions: int) -> dict[str, Any]:
        """``on_token`` for the generation loop when someone listens (:attr:`status`)."""
        if self.status is None:
            return {}
        status, most = self.status, self.max_completion_length
        return {"on_token": lambda t: status(f"sampling {completions} completions: token {t} of at most {most}")}

    @torch.no_grad()
    def sample(self, policy: nn.Module) -> RolloutBatch:
        G = self.num_generations
        rows = [self.dataset[i] for i in self._next_indices()]
        prompts = [row[self.prompt_column] for row in rows]
        texts = [self.render(p) for p in prompts]
        for row, text in zip(rows, texts):
            if not text.strip():
                raise ValueError(f"LMGroupSampler: empty prompt in column {self.prompt_column!r}: {row!r}")
        conversational = not isinstance(prompts[0], str)
        # A chat template already holds the special tokens; a plain string gets the tokenizer's.
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not conversational)
        if self.max_context_length is not None:
            too_long = enc["attention_mask"].sum(-1) + self.max_completion_length > self.max_context_length
            if too_long.any():
                i = int(too_long.nonzero()[0])
                raise ValueError(
                    f"LMGroupSampler: a prompt of {int(enc['attention_mask'][i].sum())} tokens plus "
                    f"max_completion_length={self.max_completion_length} exceeds the model's context of "
                    f"{self.max_context_length} tokens: {texts[i][:200]!r}"
                )
        device = next(policy.parameters()).device
        prompt_ids, prompt_mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
        outs, logps = [], []
        extra = {"output_logprobs": True} if self.sampler_logprobs else {}
        for s in range(0, len(rows), self.generation_batch_size):
            sl = slice(s, s + self.generation_batch_size)
            out = policy.generate(
                prompt_ids[sl], prompt_mask[sl], max_new_tokens=self.max_completion_length,
                num_return_sequences=G, pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.eos_ids, **self.sampling, **self._progress(len(rows) * G), **extra,
            )
            if self.sampler_logprobs:
                out, lp = out
                logps.append(lp)
            outs.append(out[:, prompt_ids.shape[1]:])
        if self.status is not None:
            self.status("scoring and updating")
        width = max(o.shape[1] for o in outs)
        pad_id = self.tokenizer.pad_token_id
        tokens = torch.cat([nn.functional.pad(o, (0, width - o.shape[1]), value=pad_id) for o in outs])
        batch = text_batch(self.tokenizer, rows, self.prompt_column, G, prompt_ids, prompt_mask, tokens, self.eos_ids,
                           self.sampling["temperature"], texts)
        if logps:
            logp = torch.cat([nn.functional.pad(lp.float(), (0, width - lp.shape[1])) for lp in logps])
            batch.sampler_logp = torch.where(batch.mask, logp, torch.zeros_like(logp))
        if self.stage is not None:
            batch.metrics["curriculum/stage"] = float(self.stage)
        return batch


def text_batch(
    tokenizer, rows: Sequence[dict[str, Any]], prompt_column: str, G: int, prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor, tokens: torch.Tensor, eos_ids: Sequence[int], temperature: float,
    prompt_texts: Sequence[str],
) -> RolloutBatch:
    """The batch of G sampled completions ``tokens`` (B, T) per prompt row: masks cut at the first
    EOS, padding after it, decoded texts and the rows' other columns for the reward functions.
    ``prompt_ids`` and ``prompt_mask`` hold one left-padded row per prompt."""
    mask, truncated = completion_mask(tokens, eos_ids)
    tokens = torch.where(mask, tokens, torch.full_like(tokens, tokenizer.pad_token_id))
    prompts = [row[prompt_column] for row in rows]
    completion_ids = [t[m].tolist() for t, m in zip(tokens, mask)]
    completions_text = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    completions: list[Any] = (
        completions_text if isinstance(prompts[0], str) else [[{"role": "assistant", "content": c}] for c in completions_text]
    )
    columns = {k: [row[k] for row in rows for _ in range(G)] for k in rows[0] if k != prompt_column}
    return RolloutBatch(
        context=prompt_ids.repeat_interleave(G, 0),
        tokens=tokens,
        mask=mask,
        group=torch.arange(len(rows), device=tokens.device).repeat_interleave(G),
        num_generations=G,
        rewards=torch.zeros(len(rows) * G, device=tokens.device),
        prompt_mask=prompt_mask.repeat_interleave(G, 0),
        temperature=temperature,  # the policy scores under the sampled distribution
        text=TextSamples(
            prompts=[p for p in prompts for _ in range(G)],
            prompt_texts=[t for t in prompt_texts for _ in range(G)],
            completions=completions,
            completion_texts=completions_text,
            completion_ids=completion_ids,
            columns=columns,
        ),
        truncated=truncated,
        metrics={"policy/truncated_fraction": float(truncated.float().mean())},
    )
