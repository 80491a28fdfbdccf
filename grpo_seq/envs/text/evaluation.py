"""Greedy episodes of a text environment on held-out seeds: success rate, return, turns, reply tokens.

Training draws each start state's seed below ``2**31 - 1``; held-out episodes use the seeds from
:data:`HELD_OUT_SEED` = ``2**31`` on, which training never draws.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from .sampler import Episode, TextEnvGroupSampler

__all__ = ["HELD_OUT_SEED", "evaluate_text_env", "episode_record"]

HELD_OUT_SEED = 2**31


def evaluate_text_env(policy: nn.Module, sampler: TextEnvGroupSampler, episodes: int,
                      first_seed: int = HELD_OUT_SEED) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """``episodes`` greedy episodes with the seeds ``first_seed, first_seed + 1, ...``, played on
    ``sampler``'s environments with its limits, as many at a time as it has environments.

    Returns the figures (``success_rate`` over the episodes whose environment reported success,
    NaN if none did; ``return``, ``turns``, ``reply_tokens`` per episode and ``truncated_fraction``)
    and one record per episode (:func:`episode_record`)."""
    if episodes < 1:
        raise ValueError(f"evaluate_text_env: episodes must be >= 1, got {episodes}")
    was_training = policy.training
    policy.eval()
    played: list[Episode] = []
    for start in range(0, episodes, len(sampler.envs)):
        seeds = list(range(first_seed + start, first_seed + min(episodes, start + len(sampler.envs))))
        played += sampler.play(policy, seeds, greedy=True)[0]
    policy.train(was_training)
    reported = [e.success for e in played if e.success is not None]
    figures = {
        "episodes": float(len(played)),
        "success_rate": float(np.mean(reported)) if reported else float("nan"),
        "return": float(np.mean([e.total for e in played])),
        "turns": float(np.mean([e.turns for e in played])),
        "reply_tokens": float(np.mean([sum(e.trained) for e in played])),
        "truncated_fraction": float(np.mean([e.truncated for e in played])),
    }
    return figures, [episode_record(e, first_seed + i) for i, e in enumerate(played)]


def episode_record(episode: Episode, seed: int) -> dict[str, Any]:
    """An episode as JSON-able data: seed, prompt, messages, return, success, truncated."""
    return {"seed": seed, "prompt": episode.prompt, "conversation": episode.messages, "return": episode.total,
            "success": episode.success, "truncated": episode.truncated}
