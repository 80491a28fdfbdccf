"""Dynamic sampling (DAPO, arXiv 2503.14476, section 3.2; verl's ``filter_groups``): a group whose
rewards are all equal has advantage 0 everywhere and trains nothing, so it is dropped and more
groups are drawn until the step's batch is full or the resampling rounds run out.

The pieces the trainer composes: which groups carry signal (:func:`informative_groups`), the
rows of those groups (:func:`group_rows`), and one batch of whole groups from several draws
(:func:`concat_groups`, padding tokens and contexts to the longest draw).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
from torch import Tensor

from ..math.advantages import equal_reward_groups
from ..math.batch import _PER_OUTPUT, _PER_TOKEN, RolloutBatch, TextSamples

__all__ = ["informative_groups", "group_rows", "concat_groups", "fill_informative", "DYNAMIC_SAMPLING_METRICS"]

# The metrics a step with dynamic sampling reports (means over processes).
DYNAMIC_SAMPLING_METRICS = ("dynamic_sampling/groups_drawn", "dynamic_sampling/groups_dropped",
                            "dynamic_sampling/rounds")


def informative_groups(batch: RolloutBatch) -> Tensor:
    """``(num_groups,)`` bools: True for a group whose rewards differ (``max != min``), the only
    groups whose outcome advantages are not all 0."""
    return ~equal_reward_groups(batch.rewards.reshape(-1, batch.num_generations))


def group_rows(keep_groups: Tensor, num_generations: int) -> Tensor:
    """The row indices (group-major layout) of the groups ``keep_groups`` marks True."""
    return torch.nonzero(keep_groups.repeat_interleave(num_generations)).flatten()


def _pad(t: Tensor, length: int, left: bool = False) -> Tensor:
    """``t`` padded with zeros (False) along dim 1 to ``length``, on the right or the left."""
    extra = length - t.shape[1]
    if extra <= 0:
        return t
    pad = t.new_zeros((t.shape[0], extra, *t.shape[2:]))
    return torch.cat([pad, t] if left else [t, pad], 1)


def _join_text(parts: list[TextSamples]) -> TextSamples:
    """The entries of ``parts`` one after another (list fields joined, columns joined by name)."""
    joined = {f.name: [v for p in parts for v in getattr(p, f.name)] for f in dataclasses.fields(TextSamples)
              if f.name != "columns"}
    return TextSamples(**joined, columns={k: [v for p in parts for v in p.columns[k]] for k in parts[0].columns})


def concat_groups(batches: list[RolloutBatch], partial: bool = False) -> RolloutBatch:
    """One group-major batch holding every row of ``batches`` (each of whole groups, same G):
    per-token fields padded on the right to the longest ``T`` (mask False), a text prompt's ids
    and attention mask on the left (they are left-padded), per-step observations on the right;
    group ids renumbered so groups from different draws stay apart; each metric the mean over
    the draws that report it. ``partial``: the rows need not make whole groups (marked so)."""
    if len(batches) == 1:
        return dataclasses.replace(batches[0], partial=partial)
    first = batches[0]
    T = max(b.tokens.shape[1] for b in batches)
    text_context = first.prompt_mask is not None
    P = max(b.context.shape[1] for b in batches) if text_context else T
    out = {"tokens": torch.cat([_pad(b.tokens, T) for b in batches])}
    for name in _PER_OUTPUT:
        parts = [getattr(b, name) for b in batches]
        if parts[0] is None:
            continue
        if name in _PER_TOKEN:
            parts = [_pad(p, T) for p in parts]
        elif name == "prompt_mask" or (name == "context" and text_context):
            parts = [_pad(p, P, left=True) for p in parts]
        elif name == "context" and all(p.dim() >= 2 and p.shape[1] == b.tokens.shape[1] for p, b in zip(parts, batches)):
            parts = [_pad(p, T) for p in parts]  # one observation per step
        out[name] = torch.cat(parts)
    offsets = torch.cumsum(torch.tensor([0] + [b.num_groups for b in batches[:-1]]), 0)
    out["group"] = torch.cat([b.group - b.group.min() + int(o) for b, o in zip(batches, offsets)])
    keys = {k for b in batches for k in b.metrics}
    metrics = {k: sum(b.metrics[k] for b in batches if k in b.metrics) / sum(k in b.metrics for b in batches)
               for k in keys}
    text = _join_text([b.text for b in batches]) if first.text is not None else None
    return dataclasses.replace(first, **out, text=text, metrics=metrics, partial=partial)


def fill_informative(draw: Callable[[], RolloutBatch], num_groups: int, max_rounds: int,
                     can_draw: Callable[[], bool] = lambda: True) -> tuple[RolloutBatch, int]:
    """Draw batches until ``num_groups`` groups whose rewards differ are kept, or ``max_rounds``
    draws after the first have been made, or ``can_draw()`` says no more may be (a budget of
    environment steps spent); then the kept groups (in the order drawn, at most
    ``num_groups``) are the step's batch, however few. If no draw held one, the last draw is
    kept whole (its advantages are all 0: it trains nothing, as without dynamic sampling).

    Returns ``(batch, unseen_tokens)``: the tokens drawn that the batch does not hold (dropped
    groups' steps still count as sampled). ``batch.metrics`` gains :data:`DYNAMIC_SAMPLING_METRICS`:
    groups drawn, groups dropped (drawn and not trained) and the extra rounds used."""
    kept: list[RolloutBatch] = []
    n_kept = drawn = drawn_tokens = rounds = 0
    while True:
        batch = draw()
        drawn += batch.num_groups
        drawn_tokens += batch.num_tokens
        good = informative_groups(batch)
        take = good & (torch.cumsum(good.long(), 0) <= num_groups - n_kept)  # no more than the step needs
        if bool(take.any()):
            kept.append(batch.select(group_rows(take, batch.num_generations).to(batch.tokens.device)))
            n_kept += int(take.sum())
        if n_kept >= num_groups or rounds >= max_rounds or not can_draw():
            break
        rounds += 1
    out = concat_groups(kept) if kept else batch
    out.metrics.update(dict(zip(DYNAMIC_SAMPLING_METRICS, (float(drawn), float(drawn - out.num_groups), float(rounds)))))
    return out, drawn_tokens - out.num_tokens
