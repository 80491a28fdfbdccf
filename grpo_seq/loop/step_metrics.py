"""A step's metrics over all processes: per-output values gathered (exact std and max), token
statistics as token means, the rest averaged."""

from __future__ import annotations

import math
from typing import Any

import torch
from accelerate import Accelerator
from torch import Tensor

from ..math.advantages import equal_reward_groups
from ..math.batch import RolloutBatch
from ..math.objective import SAMPLING_MEANS
from .diagnostics import identical_groups
from .update import UpdateStats

__all__ = ["step_metrics", "gather_rows", "TOKEN_STATS"]

TOKEN_STATS = ("kl", "clip_fraction", "ratio", "entropy")  # means over scored tokens


def step_metrics(acc: Accelerator, batch: RolloutBatch, live: Tensor, stats: UpdateStats, *, ragged: bool,
                 nonfinite_steps: int, correction: dict[str, Any] | None) -> tuple[dict[str, float], Tensor, Tensor, int]:
    """The reward, policy, loss and sampling metrics of a step, the rewards of every process's
    groups ``(groups, G)``, whether each group's members produced the same output ``(groups,)``,
    and the tokens sampled in the kept outputs. ``ragged``: processes may
    hold different numbers of outputs (dynamic sampling)."""
    same = identical_groups(batch.tokens, batch.mask, batch.num_generations).repeat_interleave(batch.num_generations)
    rewards, lengths, same = gather_rows(acc, ragged, batch.rewards.float().contiguous(),
                                         batch.lengths().float().contiguous(), same.float())
    grouped = rewards.reshape(-1, batch.num_generations)
    zero = torch.zeros((), device=acc.device)
    # target_kl's estimate where it watches one (every process then holds it: PolicyUpdate.run)
    names = TOKEN_STATS + (("approx_kl",) if "approx_kl" in stats.token_sums else ())
    sums = acc.reduce(torch.stack([*(torch.as_tensor(stats.token_sums.get(n, zero)).float() for n in names),
                                   torch.as_tensor(stats.tokens, device=acc.device).float()]), "sum")
    # When every output was skipped no token was scored: the statistics are NaN (null in
    # metrics.jsonl), except KL, which skipping's beta = 0 leaves at 0 anyway.
    scored = float(sums[-1]) > 0
    token_means = {n: sums[i] / sums[-1] if scored else (zero if n == "kl" else zero + float("nan"))
                   for i, n in enumerate(names)}
    # no optimizer step at all: target_kl stopped the passes at the first minibatch
    averaged = {"perf/trained_fraction": live.float().mean(),
                "loss/policy": torch.stack(stats.losses).mean() if stats.losses else zero,
                "loss/grad_norm": torch.stack(stats.grad_norms).mean() if stats.grad_norms else zero,
                "perf/optimizer_steps": 0.0 if stats.skipped else float(len(stats.grad_norms)),
                "loss/nonfinite_steps": float(nonfinite_steps), **batch.metrics}
    if stats.entropy_bonuses:  # what the token-mean entropy term took off loss/policy
        averaged["loss/entropy_bonus"] = torch.stack(stats.entropy_bonuses).mean()
    if "approx_kl" in stats.token_sums:  # target_kl: whether it stopped the passes
        averaged["perf/passes_stopped"] = float(stats.stopped_early)
    reduced = acc.reduce(torch.stack([torch.as_tensor(v, device=acc.device).float() for v in averaged.values()]), "mean")
    metrics = {
        "reward/mean": rewards.mean(), "reward/std": rewards.std(), "reward/group_std": grouped.std(dim=1).mean(),
        "reward/zero_std_groups": equal_reward_groups(grouped).float().mean(),
        "policy/completion_length": lengths.mean(), "policy/completion_length_max": lengths.max(),
        **{f"policy/{n}": v for n, v in token_means.items()},
        **dict(zip(averaged, reduced)),
    }
    metrics = {k: float(v) for k, v in metrics.items()}
    if correction is not None:
        metrics.update(sampling_metrics(acc, stats))
    return metrics, grouped, same.reshape(-1, batch.num_generations)[:, 0] > 0, int(lengths.sum())


def gather_rows(acc: Accelerator, ragged: bool, *values: Tensor) -> list[Tensor]:
    """Per-output values of every process, concatenated; ``ragged`` processes may hold different
    numbers of outputs, so each is padded to the longest and the padding dropped."""
    if not ragged or acc.num_processes == 1:
        return [acc.gather(v) for v in values]
    real = acc.gather(acc.pad_across_processes(torch.ones(len(values[0]), device=acc.device), dim=0)).bool()
    return [acc.gather(acc.pad_across_processes(v, dim=0))[real] for v in values]


def sampling_metrics(acc: Accelerator, stats: UpdateStats) -> dict[str, float]:
    """The sampler-versus-policy statistics over all processes (with a sampler correction): token
    means of :data:`grpo_seq.math.objective.SAMPLING_MEANS`, the min and max importance weight; NaN
    where no token was trained."""
    zero = torch.zeros((), device=acc.device)
    sums = acc.reduce(torch.stack([*(torch.as_tensor(stats.token_sums.get(n, zero)).float() for n in SAMPLING_MEANS),
                                   torch.as_tensor(stats.tokens, device=acc.device).float()]), "sum")
    out = {n: float(sums[i] / sums[-1]) if float(sums[-1]) > 0 else math.nan for i, n in enumerate(SAMPLING_MEANS)}
    for name, pick in (("sampling/is_ratio_min", torch.min), ("sampling/is_ratio_max", torch.max)):
        found = acc.gather(stats.extremes.get(name, zero + math.nan).float().reshape(1))
        found = found[torch.isfinite(found)]  # a process or micro-batches with no trained token: +-inf
        out[name] = float(pick(found)) if len(found) else math.nan
    return out
