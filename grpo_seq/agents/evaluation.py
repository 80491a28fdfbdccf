"""Held-out evaluation of an agent: its rollout once per held-out item, every call decoded greedily.

The score of an item is the reward its rollout returns, so "before" and "after" training compare
the same program on the same items with the policy's likeliest replies (as a text environment's
held-out episodes are greedy). The records keep each item's place, reward and conversation.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from ..io.rows import row_place
from .sampler import AgentGroupSampler

__all__ = ["evaluate_agent"]


def evaluate_agent(policy: nn.Module, sampler: AgentGroupSampler,
                   items: Sequence[dict[str, Any]]) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """``(figures, records)`` of one greedy rollout per item of ``items``: the mean reward and
    calls, and per item its place, reward, calls and messages (the last call's, with its reply)."""
    was_training = policy.training
    policy.eval()
    try:
        with torch.no_grad():
            played = sampler.play(policy, list(range(len(items))), greedy=True, items=items)
    finally:
        policy.train(was_training)
    records = []
    for index, trajectory, result in played:
        last = trajectory.calls[-1]
        records.append({"item": row_place(items, index), "reward": result.reward, "calls": len(trajectory.calls),
                        "conversation": [*last.messages, last.reply], **({"metrics": result.metrics}
                                                                         if result.metrics else {})})
    figures = {"reward": float(np.mean([r["reward"] for r in records])),
               "calls": float(np.mean([r["calls"] for r in records])), "items": float(len(records))}
    return figures, records
