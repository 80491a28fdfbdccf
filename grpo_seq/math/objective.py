"""The GRPO objective as pure functions (DeepSeekMath, arXiv 2402.03300, equation 3).

    J = 1/G sum_i 1/|o_i| sum_t [ min(r_it A_it, clip(r_it, 1-eps, 1+eps) A_it) - beta KL_it ]

(plus ``c H_it``, an entropy bonus, where asked: not in the paper; PPO's and Stable-Baselines3's),

with ``r_it = pi_theta / pi_old`` per token and the k3 estimator
``KL_it = pi_ref/pi_theta - log(pi_ref/pi_theta) - 1`` against a frozen reference.

The variants the literature moved to since (TRL 1.16's option names, verl's where TRL has none)
change one piece each: how the ratio is formed (GSPO's sequence level), what multiplies the
advantage (CISPO, SAPO, VESPO, two-sided clipping), which tokens count (off-policy and
high-entropy masks), how the per-token terms are summed (DAPO, LUSPO) and which KL estimator is
used (k1, k2, k3); :class:`LossVariant` holds those choices, and its defaults are the paper's.
No model and no optimizer live here: every function takes per-token tensors shaped
``(B, T)`` plus a completion mask, so each is tested against hand-computed numbers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
# How each loss type sums its per-token terms (TRL 1.16's _compute_loss): the name of the
# reduction :func:`aggregate` applies.
REDUCTIONS: dict[str, str] = {"grpo": "grpo", "sapo": "grpo", "bnpo": "bnpo", "dr_grpo": "dr_grpo", "dapo": "dapo",
                              "cispo": "dapo", "vespo": "dapo", "luspo": "luspo"}
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
IS_LEVELS: tuple[str, ...] = ("token", "sequence")
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
    "kl_estimate",
    "KL_ESTIMATORS",
    "IS_LEVELS",
    "REDUCTIONS",
    "sequence_log_ratio",
    "importance_ratio",
    "clipped_surrogate",
    "clipped_mask",
    "cispo_objective",
    "sapo_objective",
    "vespo_weights",
    "off_policy_mask",
    "high_entropy_mask",
    "aggregate",
    "LossVariant",
    "policy_objective",
    "clip_fraction_mask",
    "entropy_bonus",
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


def kl_estimate(logp_t: Tensor, ref_logp_t: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token estimate of ``KL(pi_theta || pi_ref)`` from tokens sampled from ``pi_theta``
    (Schulman 2020, "Approximating KL divergence"; verl's ``kl_loss_type``), with
    ``l = logp - ref_logp = log(pi_theta / pi_ref)`` (the reference carries no gradient):

    - ``k1 = l``: unbiased for the KL's value, but it is negative on some tokens and has high
      variance; as a loss its expected gradient is 0 (``E_pi[grad log pi] = 0``), so it does not
      pull the policy toward the reference at all unless folded into the reward (``kl_in_reward``).
    - ``k2 = l^2 / 2``: biased for the value (>= 0, low variance), but its expected gradient
      ``E_pi[l grad log pi]`` is exactly the gradient of the reverse KL ``KL(pi_theta || pi_ref)``
      (Tang & Munos 2025, "On a few pitfalls in KL divergence gradient estimation for RL").
    - ``k3 = exp(-l) + l - 1`` (the default, DeepSeekMath's): unbiased for the value and >= 0 with
      low variance; its expected gradient ``E_pi[(1 - pi_ref/pi) grad log pi]`` is the gradient of
      the forward KL ``KL(pi_ref || pi_theta)``, not of the reverse one (DeepSeek-V3.2's
      ``use_bias_correction_kl`` weights it by the ratio to undo this off-policy).
    """
    if estimator == "k3":
        return k3_kl(logp_t, ref_logp_t)
    log_ratio = logp_t - ref_logp_t.detach()
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")


def sequence_log_ratio(log_ratio_t: Tensor, mask_t: Tensor) -> Tensor:
    """GSPO's sequence-level log ratio (Zheng et al. 2025, "Group Sequence Policy Optimization",
    arXiv 2507.18071): ``s_i = 1/|o_i| sum_t log(pi_theta(o_it) / pi_old(o_it))``, the log of the
    length-normalised sequence ratio ``(pi_theta(o_i) / pi_old(o_i))^(1/|o_i|)``, shaped ``(B, 1)``."""
    m = mask_t.to(log_ratio_t.dtype)
    return ((log_ratio_t * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)


def importance_ratio(logp_t: Tensor, old_logp_t: Tensor, mask_t: Tensor, level: str = "token") -> Tensor:
    """The ratio the surrogate clips: per token, ``r_it = pi_theta / pi_old`` (``(B, T)``), or
    with ``level="sequence"`` GSPO's ``exp(s_i)`` (:func:`sequence_log_ratio`, ``(B, 1)``)."""
    if level == "token":
        return probability_ratio(logp_t, old_logp_t)
    if level == "sequence":
        return torch.exp(sequence_log_ratio(logp_t - old_logp_t.detach(), mask_t))
    raise ValueError(f"unknown importance sampling level {level!r}; choose one of {IS_LEVELS}")


def clipped_surrogate(ratio_t: Tensor, adv_t: Tensor, eps_low: float, eps_high: float | None = None,
                      delta: float | None = None) -> Tensor:
    """PPO's pessimistic surrogate per token: ``min(r A, clip(r, 1-eps_low, 1+eps_high) A)``.

    ``eps_high`` defaults to ``eps_low`` (symmetric clipping, as in the paper). ``delta`` bounds
    the unclipped ratio too, ``min(min(r, delta) A, clip(r) A)`` (two-sided clipping, INTELLECT-2,
    arXiv 2505.07291): a negative advantage can no longer be multiplied by an unbounded ratio.
    """
    eps_high = eps_low if eps_high is None else eps_high
    clipped = torch.clamp(ratio_t, 1.0 - eps_low, 1.0 + eps_high)
    if delta is not None:
        ratio_t = torch.clamp(ratio_t, max=delta)
    return torch.minimum(ratio_t * adv_t, clipped * adv_t)


def clipped_mask(ratio_t: Tensor, adv_t: Tensor, eps_low: float, eps_high: float | None = None) -> Tensor:
    """Where the clipped branch is taken and the token's gradient is therefore 0."""
    eps_high = eps_low if eps_high is None else eps_high
    return ((adv_t > 0) & (ratio_t > 1.0 + eps_high)) | ((adv_t < 0) & (ratio_t < 1.0 - eps_low))


def cispo_objective(ratio_t: Tensor, adv_t: Tensor, logp_t: Tensor, eps_max: float) -> Tensor:
    """CISPO (MiniMax-M1, arXiv 2506.13585): ``sg(min(r, eps_max)) A log pi_theta``. The
    importance weight is clipped and detached instead of the update, so every token keeps a
    gradient ``min(r, eps_max) A grad log pi``; TRL passes ``epsilon_high`` as ``eps_max``."""
    return torch.clamp(ratio_t, max=eps_max).detach() * adv_t * logp_t


def sapo_objective(ratio_t: Tensor, adv_t: Tensor, tau_pos: float, tau_neg: float) -> Tensor:
    """SAPO (Gao et al. 2025, "Soft Adaptive Policy Optimization", arXiv 2511.20347): a smooth
    gate in place of the hard clip, ``f(r) A`` with ``f(r) = 4/tau sigmoid(tau (r - 1))`` (slope 1
    at ``r = 1``), ``tau = tau_pos`` where ``A > 0`` and ``tau_neg`` elsewhere."""
    tau = torch.where(adv_t > 0, torch.full_like(adv_t, tau_pos), torch.full_like(adv_t, tau_neg))
    return torch.sigmoid(tau * (ratio_t - 1.0)) * 4.0 / tau * adv_t


@torch.no_grad()
def vespo_weights(log_ratio_t: Tensor, adv_t: Tensor, mask_t: Tensor, k_pos: float = 2.0, lambda_pos: float = 3.0,
                  k_neg: float = 3.0, lambda_neg: float = 2.0, is_weight_t: Tensor | None = None) -> Tensor:
    """VESPO's Gamma weights (arXiv 2602.10693), detached: ``phi(w) = exp(lambda) w^k exp(-lambda w)``
    (``phi(1) = 1``) of the sequence ratio ``w = exp(sum_t clamp(log r_t, -20, 20))`` (times the
    sampler-correction weights, where given), ``log w`` clamped to ``[log 1e-8, 20]``; ``k`` and
    ``lambda`` are ``k_pos, lambda_pos`` where ``A >= 0``, else ``k_neg, lambda_neg``. The loss
    is ``-phi A log pi_theta``, so its gradient is ``phi A grad log pi``. Computed in log space
    exactly as TRL 1.16 does (``get_gamma_weights``); non-finite weights become 0."""
    lower = math.log(1e-8)
    log_w = (torch.clamp(log_ratio_t, -20.0, 20.0) * mask_t).sum(-1, keepdim=True)
    if is_weight_t is not None:
        log_w = log_w + torch.clamp(torch.log(is_weight_t), lower, 20.0).sum(-1, keepdim=True)
    log_w = torch.clamp(log_w, lower, 20.0)
    nonneg = adv_t >= 0
    k = torch.where(nonneg, k_pos, k_neg)
    lam = torch.where(nonneg, lambda_pos, lambda_neg).clamp(min=1e-4)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


@torch.no_grad()
def off_policy_mask(adv_t: Tensor, logp_t: Tensor, sampler_logp_t: Tensor, mask_t: Tensor, threshold: float) -> Tensor:
    """DeepSeek-V3.2's off-policy sequence mask (arXiv 2512.02556, equation 9): drop an output
    whose advantage is negative and whose mean ``log pi_sampler - log pi_theta`` over its tokens
    exceeds ``threshold``; 1 keeps, 0 drops (float, ``(B, 1)`` or ``adv_t``'s shape). Tokens the
    sampler could not score (NaN) count 0."""
    d = torch.nan_to_num(sampler_logp_t - logp_t.detach(), nan=0.0)
    keep = (adv_t >= 0) | (sequence_log_ratio(d, mask_t) <= threshold)
    return keep.to(logp_t.dtype)


@torch.no_grad()
def high_entropy_mask(entropy_t: Tensor, mask_t: Tensor, quantile: float) -> Tensor:
    """The top-``quantile`` of the masked tokens by entropy (Wang et al. 2025, "Beyond the 80/20
    rule", arXiv 2506.01939; TRL's ``top_entropy_quantile``): True where ``H_t >= q``, ``q`` the
    ``(1 - quantile)`` quantile of the masked entropies (linear interpolation, ``torch.quantile``).
    ``quantile = 0`` keeps the highest-entropy tokens only, 1 keeps all."""
    m = mask_t.bool()
    chosen = entropy_t.detach()[m].float()
    if chosen.numel() == 0:
        return torch.zeros_like(m)
    q = torch.quantile(chosen, 1.0 - quantile)
    return ((entropy_t.detach() * m) >= q) & m


def aggregate(
    values_t: Tensor,
    mask_t: Tensor,
    loss_type: str = "grpo",
    max_len: int | None = None,
    num_outputs: int | None = None,
    num_tokens: int | Tensor | None = None,
) -> Tensor:
    """Reduce per-token values ``(B, T)`` to a scalar, counting masked tokens only.

    - ``grpo`` (and ``sapo``): mean over each output's own tokens (``1/|o_i|``), then over outputs (the paper).
    - ``bnpo``: sum over all tokens / number of tokens in the batch (token-level mean).
    - ``dapo`` (and ``cispo``, ``vespo``): the same token mean (DAPO, arXiv 2503.14476), whose
      trainer passes the whole step's token count as ``num_tokens`` (TRL's ``num_items_in_batch``).
    - ``dr_grpo``: sum over all tokens / (B * max_len), no length normalisation (Dr. GRPO).
    - ``luspo``: sum over each output's tokens, mean over outputs (LUSPO, arXiv 2602.05261: each
      sequence's loss scaled by its length).

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
    kind = REDUCTIONS.get(loss_type)
    if kind == "grpo":
        per_output = masked.sum(-1) / mask_t.sum(-1).clamp(min=1.0)
        return per_output.sum() / n_out
    if kind in ("bnpo", "dapo"):
        n_tok = mask_t.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=values_t.dtype)
        return masked.sum() / n_tok.clamp(min=1.0)
    if kind == "dr_grpo":
        max_len = values_t.shape[-1] if max_len is None else max_len
        return masked.sum() / (n_out * max_len)
    if kind == "luspo":
        return masked.sum() / n_out
    raise ValueError(f"unknown loss_type {loss_type!r}; choose one of {LOSS_TYPES}")


@dataclass(frozen=True)
class LossVariant:
    """The per-token choices of the GRPO family beyond the clip range, KL weight and aggregation
    (each named as in TRL 1.16's GRPOConfig, ``kl_estimator`` as in verl); the defaults are
    DeepSeekMath's objective. :meth:`from_config` reads them off any config with these fields."""

    importance_sampling_level: str = "token"
    delta: float | None = None
    kl_estimator: str = "k3"
    use_bias_correction_kl: bool = False
    off_policy_mask_threshold: float | None = None
    top_entropy_quantile: float = 1.0
    entropy_coef: float = 0.0
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0

    @classmethod
    def from_config(cls, config: Any) -> "LossVariant":
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls) if hasattr(config, f.name)})


def policy_objective(loss_type: str, ratio_t: Tensor, old_logp_t: Tensor, adv_t: Tensor, logp_t: Tensor,
                     mask_t: Tensor, eps_low: float, eps_high: float | None, v: LossVariant,
                     is_weight_t: Tensor | None = None) -> Tensor:
    """The per-token policy term each loss type maximises (before masks, KL and entropy): the
    clipped surrogate of ``ratio_t`` (grpo, bnpo, dr_grpo, dapo, luspo; two-sided with ``delta``),
    or CISPO's, SAPO's or VESPO's (:func:`cispo_objective`, :func:`sapo_objective`,
    :func:`vespo_weights` of the per-token ``log pi_theta - log pi_old``)."""
    eps_high = eps_low if eps_high is None else eps_high
    if loss_type == "cispo":
        return cispo_objective(ratio_t, adv_t, logp_t, eps_high)
    if loss_type == "sapo":
        return sapo_objective(ratio_t, adv_t, v.sapo_temperature_pos, v.sapo_temperature_neg)
    if loss_type == "vespo":
        phi = vespo_weights(logp_t.detach() - old_logp_t.detach(), adv_t, mask_t, v.vespo_k_pos, v.vespo_lambda_pos, v.vespo_k_neg,
                            v.vespo_lambda_neg, is_weight_t)
        return phi * adv_t * logp_t
    return clipped_surrogate(ratio_t, adv_t, eps_low, eps_high, v.delta)


def clip_fraction_mask(loss_type: str, ratio_t: Tensor, adv_t: Tensor, eps_low: float,
                       eps_high: float | None) -> Tensor:
    """Where the loss type clipped a token: the clip region of the clipped surrogate, CISPO's
    ``r > eps_max`` with ``A > 0`` (TRL's ``cispo_clip_ratio``); nowhere for SAPO and VESPO."""
    if loss_type == "cispo":
        return (ratio_t > (eps_low if eps_high is None else eps_high)) & (adv_t > 0)
    if loss_type in ("sapo", "vespo"):
        return torch.zeros_like(adv_t, dtype=torch.bool) & (ratio_t > 0)
    return clipped_mask(ratio_t, adv_t, eps_low, eps_high)


def grpo_loss(
    logp_t: Tensor, old_logp_t: Tensor, adv_t: Tensor, mask_t: Tensor, *,
    eps_low: float, eps_high: float | None = None, beta: float = 0.0, ref_logp_t: Tensor | None = None,
    loss_type: str = "grpo", max_len: int | None = None, num_outputs: int | None = None,
    num_tokens: int | Tensor | None = None, ent_coef: float = 0.0, entropy_t: Tensor | None = None,
    is_weight_t: Tensor | None = None, variant: LossVariant | None = None, sampler_logp_t: Tensor | None = None,
    entropy_tokens: int | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Negative GRPO objective (to minimise) and detached per-token statistics.

    Per token, with ``p_t`` the loss type's policy term (:func:`policy_objective`), ``m_t`` the
    off-policy and high-entropy masks (``variant``), ``w_t`` the sampler-correction weight and
    ``KL_t`` the chosen estimator (:func:`kl_estimate`; times the ratio with
    ``use_bias_correction_kl``): ``J_t = p_t m_t w_t - beta KL_t + ent_coef H_t``, reduced as
    :func:`aggregate` says; ``variant.entropy_coef`` then adds TRL's bonus, ``c`` times the token
    mean of ``H_t`` over the kept tokens, whatever the loss type.

    ``is_weight_t``: importance weights against the sampler (:func:`importance_weights`, no
    gradient), applied as TRL applies its vLLM correction (VESPO folds them into its sequence
    weight). ``sampler_logp_t``: the sampler's log-probs for the off-policy mask (default
    ``old_logp_t``). ``ent_coef * H_t`` (``entropy_t``, differentiable) is PPO's entropy bonus
    (Schulman et al. 2017, equation 9), aggregated like the rest.

    Returns ``(loss, stats)`` where ``stats`` holds ``kl`` (masked mean estimate, 0 when beta is 0
    and no reference is given), ``clip_fraction`` and ``ratio`` (masked means), and with
    ``variant.entropy_coef > 0`` ``entropy_bonus``, what the loss subtracted for it.
    ``num_outputs``/``num_tokens``: the whole batch's counts when this is a micro-batch (see
    :func:`aggregate`); ``entropy_tokens`` the minibatch's token count for the entropy bonus's mean
    (:func:`entropy_bonus`).
    """
    v = variant or DEFAULT_VARIANT
    if beta > 0 and ref_logp_t is None:
        raise ValueError("beta > 0 needs reference log-probs (ref_logp_t)")
    ratio_t = importance_ratio(logp_t, old_logp_t, mask_t, v.importance_sampling_level)
    objective_t = policy_objective(loss_type, ratio_t, old_logp_t, adv_t, logp_t, mask_t, eps_low, eps_high, v, is_weight_t)
    keep_t = _kept_tokens(v, adv_t, logp_t, sampler_logp_t if sampler_logp_t is not None else old_logp_t, mask_t,
                          entropy_t)
    if keep_t is not None:
        objective_t = objective_t * keep_t
    if is_weight_t is not None and loss_type != "vespo":
        objective_t = objective_t * is_weight_t.detach()
    kl_t = kl_estimate(logp_t, ref_logp_t, v.kl_estimator) if ref_logp_t is not None else None
    if beta > 0:
        objective_t = objective_t - beta * (kl_t * ratio_t if v.use_bias_correction_kl else kl_t)
    if ent_coef > 0:
        if entropy_t is None:
            raise ValueError("ent_coef > 0 needs the per-token entropies (entropy_t)")
        objective_t = objective_t + ent_coef * entropy_t
    loss = -aggregate(objective_t, mask_t, loss_type, max_len, num_outputs, num_tokens)
    stats = _token_stats(loss_type, ratio_t, adv_t, kl_t, mask_t, eps_low, eps_high)
    if v.entropy_coef > 0:
        bonus = v.entropy_coef * entropy_bonus(entropy_t, mask_t, keep_t, entropy_tokens)
        loss = loss - bonus
        stats["entropy_bonus"] = bonus.detach()  # the loss's entropy term, not a token mean
    return loss, stats


DEFAULT_VARIANT = LossVariant()


@torch.no_grad()
def _token_stats(loss_type: str, ratio_t: Tensor, adv_t: Tensor, kl_t: Tensor | None, mask_t: Tensor, eps_low: float,
                 eps_high: float | None) -> dict[str, Tensor]:
    """Masked token means of the KL estimate (0 without one), the clipped share and the ratio."""
    m = mask_t.float()
    n = m.sum().clamp(min=1.0)
    clipped = clip_fraction_mask(loss_type, ratio_t, adv_t, eps_low, eps_high).expand(m.shape)
    return {
        "kl": (kl_t * m).sum() / n if kl_t is not None else torch.zeros(()),
        "clip_fraction": (clipped.float() * m).sum() / n,
        "ratio": (ratio_t * m).sum() / n,
    }


def _kept_tokens(v: LossVariant, adv_t: Tensor, logp_t: Tensor, sampler_logp_t: Tensor, mask_t: Tensor,
                 entropy_t: Tensor | None) -> Tensor | None:
    """The product of the off-policy and high-entropy masks the variant asks for (None: neither)."""
    keep = None
    if v.off_policy_mask_threshold is not None:
        keep = off_policy_mask(adv_t, logp_t, sampler_logp_t, mask_t, v.off_policy_mask_threshold)
    if v.top_entropy_quantile < 1.0:
        if entropy_t is None:
            raise ValueError("top_entropy_quantile < 1 needs the per-token entropies (entropy_t)")
        high = high_entropy_mask(entropy_t, mask_t, v.top_entropy_quantile).to(logp_t.dtype)
        keep = high if keep is None else keep * high
    return keep


def entropy_bonus(entropy_t: Tensor | None, mask_t: Tensor, keep_t: Tensor | None = None,
                  num_tokens: int | Tensor | None = None) -> Tensor:
    """TRL's entropy term: the token mean ``sum_t H_t k_t / sum_t k_t`` over the masked tokens the
    loss keeps (``k = mask * keep_t``), whatever the loss type; the loss subtracts
    ``entropy_coef`` times it (Skywork-OR1, arXiv 2505.22312, section 4). For a micro-batch of a
    minibatch of ``num_tokens`` tokens the mean is weighted by the micro-batch's share of them,
    ``|mask| / num_tokens``, so that without ``keep_t`` the micro-batches sum to the minibatch's mean."""
    if entropy_t is None:
        raise ValueError("entropy_coef > 0 needs the per-token entropies (entropy_t)")
    m = mask_t.to(entropy_t.dtype)
    k = m if keep_t is None else m * keep_t.to(entropy_t.dtype)
    mean = (entropy_t * k).sum() / k.sum().clamp(min=1.0)
    if num_tokens is None:
        return mean
    return mean * m.sum() / torch.as_tensor(num_tokens, dtype=entropy_t.dtype).clamp(min=1.0)


def sampler_log_ratio(old_logp_t: Tensor, sampler_logp_t: Tensor, mask_t: Tensor, level: str = "token") -> Tensor:
    """Log of the importance ratio of the trained policy against the sampler that drew the tokens.

    ``d_t = log pi_old(o_t) - log q(o_t)`` per completion token (``(B, T)``; 0 outside the mask
    and where ``q``'s log-prob is NaN, i.e. unknown), or with ``level="sequence"`` one ratio per
    completion, ``d_i = sum_t d_t`` (``(B, 1)``): the log of ``pi_old(o_i) / q(o_i)``. ``pi_old``
    is the trained policy's log-prob at sampling time, ``q`` the sampler's (a bfloat16 or int8
    copy, or vLLM in TRL: ``old_per_token_logps - sampling_per_token_logps``, TRL's GRPOTrainer).
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
