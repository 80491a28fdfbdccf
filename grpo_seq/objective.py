"""The GRPO objective as pure functions (DeepSeekMath, arXiv 2402.03300, equation 3).

    J = 1/G sum_i 1/|o_i| sum_t [ min(r_it A_it, clip(r_it, 1-eps, 1+eps) A_it) - beta KL_it ]

(plus ``c H_it``, an entropy bonus, where asked: not in the paper; PPO's and Stable-Baselines3's),

with ``r_it = pi_theta / pi_old`` per token and the k3 estimator
``KL_it = pi_ref/pi_theta - log(pi_ref/pi_theta) - 1`` against a frozen reference.
No model and no optimizer live here: every function takes per-token tensors shaped
``(B, T)`` plus a completion mask, so each is tested against hand-computed numbers.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

LossType = Literal["grpo", "bnpo", "dr_grpo"]
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo")
# Truncated / masked importance sampling against a sampler that is not the trained policy (TRL's
# vllm_importance_sampling_mode): per token or per sequence, ratios clipped or zeroed.
IS_MODES: tuple[str, ...] = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
# The token means sampler_mismatch_stats returns (besides the min and max of the weights).
SAMPLING_MEANS: tuple[str, ...] = ("sampling/kl", "sampling/kl_k1", "sampling/is_ratio_mean",
                                   "sampling/is_corrected_fraction")

__all__ = [
    "LOSS_TYPES",
    "token_logprobs",
    "token_entropy",
    "probability_ratio",
    "k3_kl",
    "clipped_surrogate",
    "clipped_mask",
    "aggregate",
    "grpo_loss",
    "IS_MODES",
    "SAMPLING_MEANS",
    "sampler_log_ratio",
    "importance_weights",
    "sampler_mismatch_stats",
]


def token_logprobs(logits: Tensor, tokens: Tensor) -> Tensor:
    """``log pi(token | context)`` from logits ``(..., V)`` and chosen tokens ``(...)``.

    ``logsumexp`` plus a gather avoids materialising a second ``(..., V)`` tensor of log-probs.
    """
    logits = logits.float()
    chosen = logits.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    return chosen - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy of the categorical distribution at each position: ``(..., V) -> (...)``."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def probability_ratio(logp_t: Tensor, old_logp_t: Tensor) -> Tensor:
    """``r_t = pi_theta / pi_old = exp(logp - old_logp)``; ``old_logp`` carries no gradient."""
    return torch.exp(logp_t - old_logp_t.detach())


def k3_kl(logp_t: Tensor, ref_logp_t: Tensor) -> Tensor:
    """Unbiased, non-negative KL estimator (k3): ``exp(d) - d - 1`` with ``d = ref_logp - logp``.

    It is 0 exactly where policy and reference agree on the sampled token and > 0 elsewhere.
    """
    d = ref_logp_t.detach() - logp_t
    return torch.exp(d) - d - 1.0


def clipped_surrogate(ratio_t: Tensor, adv_t: Tensor, eps_low: float, eps_high: float | None = None) -> Tensor:
    """PPO's pessimistic surrogate per token: ``min(r A, clip(r, 1-eps_low, 1+eps_high) A)``.

    ``eps_high`` defaults to ``eps_low`` (symmetric clipping, as in the paper).
    """
    eps_high = eps_low if eps_high is None else eps_high
    clipped = torch.clamp(ratio_t, 1.0 - eps_low, 1.0 + eps_high)
    return torch.minimum(ratio_t * adv_t, clipped * adv_t)


def clipped_mask(ratio_t: Tensor, adv_t: Tensor, eps_low: float, eps_high: float | None = None) -> Tensor:
    """Where the clipped branch is taken and the token's gradient is therefore 0."""
    eps_high = eps_low if eps_high is None else eps_high
    return ((adv_t > 0) & (ratio_t > 1.0 + eps_high)) | ((adv_t < 0) & (ratio_t < 1.0 - eps_low))


def aggregate(
    values_t: Tensor,
    mask_t: Tensor,
    loss_type: str = "grpo",
    max_len: int | None = None,
    num_outputs: int | None = None,
    num_tokens: int | Tensor | None = None,
) -> Tensor:
    """Reduce per-token values ``(B, T)`` to a scalar, counting masked tokens only.

    - ``grpo``: mean over each output's own tokens (``1/|o_i|``), then over outputs (the paper).
    - ``bnpo``: sum over all tokens / number of tokens in the batch (token-level mean).
    - ``dr_grpo``: sum over all tokens / (B * max_len), no length normalisation (Dr. GRPO).

    An output with no tokens contributes 0 and still counts in the ``grpo`` mean over outputs.

    ``num_outputs`` and ``num_tokens`` replace the batch's own counts in the denominators: a
    micro-batch of a larger batch passes the larger batch's counts, so the micro-batch losses
    sum to exactly the loss of the whole batch (gradient accumulation without approximation).
    """
    if values_t.shape != mask_t.shape:
        raise ValueError(f"values {tuple(values_t.shape)} and mask {tuple(mask_t.shape)} differ in shape")
    mask_t = mask_t.to(values_t.dtype)
    # where, not multiply: whatever sits in padding (even inf) cannot leak into the sum
    masked = torch.where(mask_t.bool(), values_t, torch.zeros_like(values_t))
    n_out = values_t.shape[0] if num_outputs is None else num_outputs
    if loss_type == "grpo":
        per_output = masked.sum(-1) / mask_t.sum(-1).clamp(min=1.0)
        return per_output.sum() / n_out
    if loss_type == "bnpo":
        n_tok = mask_t.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=values_t.dtype)
        return masked.sum() / n_tok.clamp(min=1.0)
    if loss_type == "dr_grpo":
        max_len = values_t.shape[-1] if max_len is None else max_len
        return masked.sum() / (n_out * max_len)
    raise ValueError(f"unknown loss_type {loss_type!r}; choose one of {LOSS_TYPES}")


def grpo_loss(
    logp_t: Tensor,
    old_logp_t: Tensor,
    adv_t: Tensor,
    mask_t: Tensor,
    *,
    eps_low: float,
    eps_high: float | None = None,
    beta: float = 0.0,
    ref_logp_t: Tensor | None = None,
    loss_type: str = "grpo",
    max_len: int | None = None,
    num_outputs: int | None = None,
    num_tokens: int | Tensor | None = None,
    ent_coef: float = 0.0,
    entropy_t: Tensor | None = None,
    is_weight_t: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Negative GRPO objective (to minimise) and detached per-token statistics.

    ``is_weight_t``: importance weights against the sampler (:func:`importance_weights`,
    ``(B, T)`` or ``(B, 1)``, no gradient) multiply each token's clipped surrogate, before the
    KL and entropy terms are added, as TRL applies its vLLM correction:
    ``min(r A, clip(r) A) * w - beta KL + c H``.

    With ``ent_coef`` > 0 the per-token objective gains ``ent_coef * H_t`` (``entropy_t``, the
    policy's entropy at each token, differentiable), aggregated like the rest: the entropy bonus
    of PPO (Schulman et al. 2017, equation 9), whose sign keeps the policy from collapsing early.

    Returns ``(loss, stats)`` where ``stats`` holds ``kl`` (masked mean k3, 0 when beta is 0
    and no reference is given), ``clip_fraction`` and ``ratio`` (masked means).
    ``num_outputs``/``num_tokens``: the whole batch's counts when this is a micro-batch (see
    :func:`aggregate`).
    """
    if beta > 0 and ref_logp_t is None:
        raise ValueError("beta > 0 needs reference log-probs (ref_logp_t)")
    ratio_t = probability_ratio(logp_t, old_logp_t)
    objective_t = clipped_surrogate(ratio_t, adv_t, eps_low, eps_high)
    if is_weight_t is not None:
        objective_t = objective_t * is_weight_t.detach()
    kl_t = k3_kl(logp_t, ref_logp_t) if ref_logp_t is not None else None
    if beta > 0:
        objective_t = objective_t - beta * kl_t
    if ent_coef > 0:
        if entropy_t is None:
            raise ValueError("ent_coef > 0 needs the per-token entropies (entropy_t)")
        objective_t = objective_t + ent_coef * entropy_t
    loss = -aggregate(objective_t, mask_t, loss_type, max_len, num_outputs, num_tokens)

    with torch.no_grad():
        m = mask_t.float()
        n = m.sum().clamp(min=1.0)
        stats = {
            "kl": (kl_t * m).sum() / n if kl_t is not None else torch.zeros(()),
            "clip_fraction": (clipped_mask(ratio_t, adv_t, eps_low, eps_high).float() * m).sum() / n,
            "ratio": (ratio_t * m).sum() / n,
        }
    return loss, stats


def sampler_log_ratio(old_logp_t: Tensor, sampler_logp_t: Tensor, mask_t: Tensor, level: str = "token") -> Tensor:
    """Log of the importance ratio of the trained policy against the sampler that drew the tokens.

    ``d_t = log pi_old(o_t) - log q(o_t)`` per completion token (``(B, T)``; 0 outside the mask
    and where ``q``'s log-prob is NaN, i.e. unknown), or with ``level="sequence"`` one ratio per
    completion, ``d_i = sum_t d_t`` (``(B, 1)``): the log of ``pi_old(o_i) / q(o_i)``. ``pi_old``
    is the trained policy's log-prob at sampling time, ``q`` the sampler's (a bfloat16 or int8
    copy, or vLLM in TRL: ``old_per_token_logps - sampling_per_token_logps``, GRPOTrainer).
    """
    d = old_logp_t.detach().float() - sampler_logp_t.float()
    d = torch.where(mask_t.bool(), d, d.new_zeros(()))
    d = torch.nan_to_num(d, nan=0.0)
    if level == "sequence":
        return d.sum(-1, keepdim=True)
    if level != "token":
        raise ValueError(f"unknown importance sampling level {level!r}; choose token or sequence")
    return d


def importance_weights(log_ratio: Tensor, mode: str, cap: float, floor: float = 0.0) -> tuple[Tensor, Tensor]:
    """Truncated or masked importance weights from :func:`sampler_log_ratio`'s ``d`` (same shape).

    With ``rho = exp(d)`` (Ionides 2008, truncated importance sampling; Yao et al. 2025, "Your
    efficient RL framework secretly brings you off-policy RL training"; TRL's
    ``vllm_importance_sampling_mode``):

    - ``*_truncate``: ``w = min(max(rho, floor), cap)``: the ratio clipped into ``[floor, cap]``;
    - ``*_mask``: ``w = rho`` where ``floor <= rho <= cap``, else ``w = 0`` (the token, or the
      whole sequence, drops out of the loss).

    The ``token_`` or ``sequence_`` prefix says which ``d`` the caller computed. Returns
    ``(w, corrected)``: the weights and where they differ from ``rho`` (clipped or masked).
    """
    if mode not in IS_MODES:
        raise ValueError(f"unknown importance sampling mode {mode!r}; choose one of {IS_MODES}")
    rho = torch.exp(log_ratio)
    outside = (rho < floor) | (rho > cap)
    if mode.endswith("_truncate"):
        return rho.clamp(min=floor, max=cap), outside
    return torch.where(outside, torch.zeros_like(rho), rho), outside


def sampler_mismatch_stats(old_logp_t: Tensor, sampler_logp_t: Tensor, mask_t: Tensor, weight_t: Tensor,
                          corrected: Tensor) -> dict[str, Tensor]:
    """How far the sampler ``q`` is from the trained policy ``pi``, as masked token means
    (:data:`SAMPLING_MEANS`) and the min and max of the importance weights.

    With ``d_t = log pi(o_t) - log q(o_t)`` on tokens drawn from ``q``:
    ``sampling/kl`` is the k3 estimate of KL(q || pi), ``exp(d) - d - 1`` (>= 0; Schulman 2020,
    "Approximating KL divergence"), ``sampling/kl_k1`` the k1 estimate ``-d``;
    ``sampling/is_ratio_mean|min|max`` are the weights applied (``weight_t``, per token or
    broadcast from its sequence), ``sampling/is_corrected_fraction`` the share of tokens whose
    weight was truncated or masked. Means over the masked tokens (0 with none; min/max then +-inf).
    """
    m = mask_t.bool()
    d = sampler_log_ratio(old_logp_t, sampler_logp_t, m)
    w = weight_t.detach().float().expand(m.shape)
    n = m.sum().clamp(min=1)
    zero = torch.zeros((), device=d.device)
    return {
        "sampling/kl": torch.where(m, torch.exp(d) - d - 1.0, zero).sum() / n,
        "sampling/kl_k1": -d.sum() / n,
        "sampling/is_ratio_mean": torch.where(m, w, zero).sum() / n,
        "sampling/is_corrected_fraction": (corrected.expand(m.shape) & m).float().sum() / n,
        "sampling/is_ratio_min": torch.where(m, w, zero + float("inf")).min(),
        "sampling/is_ratio_max": torch.where(m, w, zero - float("inf")).max(),
    }
