"""A reward no constant answer can game: each completion's reward minus what the same completion
earns on other items.

    r'(c, x) = r(c, x) - (1/K) sum_k r(c, x_k)

``x_1 .. x_K`` are K training rows drawn once. The subtracted term is what ``c`` earns as a
constant answer, given to every item. Under ``r'`` a policy that gives one answer to every prompt
earns 0 in expectation over the items (exactly when the K rows are the item distribution), whatever
answer it picks: collapsing to the most common answer (always "1" where a third of the answers are
"1") is worth nothing, and only an answer that depends on the question earns more than 0. Within a
group, a wrong answer costs more the more items it would be right on, so a group with no right
answer still pushes away from the common guesses.

A reward that does not depend on the item (a format or a length reward) is the same on every item
and cancels entirely; the reward functions' own values (``reward/<name>``) and the held-out scores
are the uncorrected ones.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from ..math.batch import RolloutBatch
from .rewards import RewardScorer

__all__ = ["ConstantBaseline"]


class ConstantBaseline:
    """The trainer's ``score_fn``: ``scorer``'s rewards minus each completion's mean reward on
    ``items`` rows of ``rows`` drawn once with ``seed`` (all of them when there are fewer).

    Logs ``reward/constant_score`` (the mean subtracted) beside the functions' own means.
    ``weights`` are the scorer's (the trainer reads them)."""

    def __init__(self, scorer: RewardScorer, rows: Sequence[dict[str, Any]], items: int, seed: int = 0,
                 prompt_column: str = "prompt"):
        if items < 1:
            raise ValueError(f"ConstantBaseline: items must be >= 1, got {items}")
        picked = np.random.default_rng([seed, 7]).permutation(len(rows))[:items].tolist()
        self.scorer, self.prompt_column = scorer, prompt_column
        self.refs = [rows[i] for i in picked]
        self.weights = scorer.weights

    def __call__(self, batch: RolloutBatch) -> RolloutBatch:
        batch = self.scorer(batch)
        text = batch.text
        constant = self.constant_scores(text.completions, text.completion_ids)
        batch.rewards = batch.rewards - torch.tensor(constant, dtype=batch.rewards.dtype, device=batch.rewards.device)
        batch.metrics["reward/constant_score"] = sum(constant) / len(constant)
        return batch

    def constant_scores(self, completions: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None = None
                        ) -> list[float]:
        """Each completion's weighted reward averaged over the reference rows."""
        k = len(self.refs)
        prompts = [ref[self.prompt_column] for _ in completions for ref in self.refs]
        columns = {name: [ref[name] for _ in completions for ref in self.refs]
                   for name in self.refs[0] if name != self.prompt_column}
        repeated = [c for c in completions for _ in range(k)]
        ids = None if completion_ids is None else [i for i in completion_ids for _ in range(k)]
        totals, _ = self.scorer.score(prompts, repeated, columns, ids)
        return [sum(totals[j * k:(j + 1) * k]) / k for j in range(len(completions))]
