"""TRL's ``evaluate``: completions of the evaluation prompts sampled as in training, scored, and
the GRPO loss of that batch, under TRL's ``eval_*`` names."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..io.prompt_data import prompt_rows, read_rows
from ..scoring.rewards import RewardScorer
from ..math.stats import mean_interval, paired_difference

__all__ = ["eval_datasets", "eval_surrogate", "evaluate_rows", "against_first"]


def eval_datasets(data: Any) -> dict[str, Any]:
    """``{prefix: dataset}``: ``eval`` for one dataset, ``eval_<name>`` for each of a dict's
    (a ``DatasetDict``, ``IterableDatasetDict`` or plain dict), as transformers names them."""
    if isinstance(data, dict):
        return {f"eval_{name}": d for name, d in data.items()}
    return {"eval": data}


def eval_surrogate(advantages: torch.Tensor, lengths: torch.Tensor, loss_type: str, max_length: int) -> float:
    """The GRPO loss of a batch at ratio 1 (the policy that sampled it), without the KL term:

        grpo:     L = -(1/B) sum_i A_i                         (each output's token mean, then the mean)
        dr_grpo:  L = -(sum_i A_i |o_i|) / (B * max_length)
        others:   L = -(sum_i A_i |o_i|) / (sum_i |o_i|)       (dapo, bnpo: the batch's token mean)

    ``advantages``, ``lengths``: ``(B,)``; ``|o_i|`` the completion's length."""
    a, n = advantages.float(), lengths.float()
    if loss_type == "grpo":
        return float(-a.mean())
    if loss_type == "dr_grpo":
        return float(-(a * n).sum() / (a.numel() * max_length))
    return float(-(a * n).sum() / n.sum().clamp(min=1))


def evaluate_rows(run: Any, data: Any, scorer: RewardScorer, num_generations: int, batch_size: int,
                  prefix: str, generation: dict[str, Any] | None = None) -> tuple[dict[str, float], list[float]]:
    """Sample ``num_generations`` completions of every prompt of ``data`` with the run's policy and
    sampling settings, score them, and return TRL's metrics under ``prefix``: ``_loss``
    (:func:`eval_surrogate`), ``_reward``, ``_reward_std``, ``_rewards/<fn>/mean`` and ``/std``,
    ``_completions/mean_length``, and ``_reward_ci_low`` and ``_high`` (the 95% interval of the
    mean over prompts of each prompt's mean reward); with each prompt's mean reward, for pairing
    with a later evaluation. ``generation``: more ``generate`` options, as in training."""
    cfg = run.spec
    rows = prompt_rows(read_rows(data), "prompt", source="eval_dataset")
    scorer.check_dataset(rows, source="eval_dataset")
    drawn = max(num_generations, 2)  # the sampler draws groups of 2 or more: with 1, the first of each pair counts
    batch = scorer(run.sample_rows(rows, drawn, batch_size, generation))
    keep = torch.arange(0, batch.batch_size, drawn // num_generations if num_generations == 1 else 1)
    rewards, components = batch.rewards.float()[keep], batch.reward_components[keep]
    grouped = rewards.view(-1, num_generations)
    adv = _group_advantages(grouped, cfg.scale_rewards != "none").flatten()
    lengths = batch.mask.sum(-1)[keep]
    out = {f"{prefix}_loss": eval_surrogate(adv, lengths, cfg.loss_type, cfg.max_completion_length),
           f"{prefix}_reward": float(rewards.mean()),
           f"{prefix}_reward_std": float(grouped.std(-1).nan_to_num().mean()) if num_generations > 1 else 0.0,
           f"{prefix}_completions/mean_length": float(lengths.float().mean())}
    out.update(_per_function(components, scorer.names, prefix))
    per_prompt = grouped.mean(-1).tolist()
    low, high = mean_interval(per_prompt)
    out.update({f"{prefix}_reward_ci_low": low, f"{prefix}_reward_ci_high": high})
    return out, per_prompt


def against_first(first: Sequence[float], now: Sequence[float], prefix: str) -> dict[str, float]:
    """The paired difference of each prompt's mean reward, now minus the first evaluation's (the
    model before training, where ``evaluate`` ran before ``train``), with its 95% interval
    (:func:`grpo_seq.math.stats.paired_difference`)."""
    d = paired_difference(first, now)
    return {f"{prefix}_reward_vs_first": d["value"], f"{prefix}_reward_vs_first_ci_low": d["interval"][0],
            f"{prefix}_reward_vs_first_ci_high": d["interval"][1]}


def _group_advantages(grouped: torch.Tensor, scale: bool) -> torch.Tensor:
    """``A_i = (r_i - mean_g(r)) / (std_g(r) + 1e-4)`` over each group (``r_i - mean_g(r)`` without
    ``scale``), as TRL's evaluation computes them; 0 for a group of one."""
    if grouped.shape[-1] < 2:
        return torch.zeros_like(grouped)
    centred = grouped - grouped.mean(-1, keepdim=True)
    return centred / (grouped.std(-1, keepdim=True) + 1e-4) if scale else centred


def _per_function(components: torch.Tensor, names: Sequence[str], prefix: str) -> dict[str, float]:
    """Each function's mean and standard deviation over the samples it scored (NaN: none)."""
    out = {}
    for j, name in enumerate(names):
        values = components[:, j]
        values = values[~values.isnan()]
        out[f"{prefix}_rewards/{name}/mean"] = float(values.mean()) if len(values) else float("nan")
        out[f"{prefix}_rewards/{name}/std"] = float(values.std()) if len(values) > 1 else 0.0
    return out
