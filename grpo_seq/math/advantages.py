"""Group-relative advantages (DeepSeekMath, arXiv 2402.03300, section 4.1.2 and 4.1.3).

Pure functions on tensors shaped ``(num_groups, G)`` for outcome rewards and
``(num_groups, G, T)`` for per-step rewards, so every formula tests against hand-computed
numbers. The ``_t`` suffix marks per-timestep (per-token) values.

A group whose rewards are all equal carries no preference between its members: its
advantage is exactly 0, never NaN (the paper's ``/ std`` would divide by zero). "Equal" is
tested exactly, as max == min over the values compared (:func:`all_equal`), never as
``std == 0``: the float std of ten equal rewards of 0.1 is about 1e-8, not 0, and dividing by it
would blow centring noise up into advantages of order 1.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from .batch import RolloutBatch
    from ..loop.config import LoopConfig

__all__ = [
    "all_equal", "equal_reward_groups", "outcome_advantages", "gdpo_advantages", "kl_penalised_rewards", "process_advantages", "stepwise_return_advantages", "broadcast_outcome",
    "discounted_returns", "compute_advantages", "steps_of_tokens", "centred_std", "anchor_states",
    "anchor_step_advantages", "anchor_advantages", "group_advantages", "shared_advantages",
]


def all_equal(values: Tensor, mask: Tensor | None, dim: int | tuple[int, ...]) -> Tensor:
    """True where the values under ``mask`` along ``dim`` are all exactly equal (or fewer than two).

    ``max == min`` over the masked values, keeping ``dim``: the one test of "no preference"
    that every advantage function here uses. A float mean or std of equal values can be one ulp
    off; max and min of equal values are those values.
    """
    if mask is None:
        return values.amax(dim=dim, keepdim=True) == values.amin(dim=dim, keepdim=True)
    big = torch.finfo(values.dtype).max
    keep = mask.bool()
    hi = torch.where(keep, values, torch.full_like(values, -big)).amax(dim=dim, keepdim=True)
    lo = torch.where(keep, values, torch.full_like(values, big)).amin(dim=dim, keepdim=True)
    return (hi == lo) | (keep.sum(dim=dim, keepdim=True) < 2)


def equal_reward_groups(rewards: Tensor) -> Tensor:
    """``(num_groups,)`` bools: True for a group of ``(num_groups, G)`` rewards whose members all
    earned the same reward, ``max_i r_i == min_i r_i`` (:func:`all_equal` along the group). Such a
    group's advantages are 0: it trains nothing."""
    return all_equal(rewards, None, 1).squeeze(1)


def centred_std(centred: Tensor, n: Tensor | int, dim: int | tuple[int, ...]) -> Tensor:
    """The Bessel std of values already centred, ``sqrt(sum c^2 / (n - 1))`` along ``dim`` (kept),
    computed as ``m * sqrt(sum (c / m)^2 / (n - 1))`` with ``m = max |c|``.

    Equal in exact arithmetic; in float32 the plain form squares differences under about 4e-23 to 0
    (and those under 1e-19 to subnormals), and a group whose members differ by so little (a reward
    discounted by 0.4^95 at the end of one member's episode) would be divided by 0. Scaled first, such a group gets the advantages any
    other difference gets: +-1/sqrt(2) for two members.
    """
    m = centred.abs().amax(dim=dim, keepdim=True)
    unit = centred / torch.where(m > 0, m, torch.ones_like(m))
    n = torch.as_tensor(n, dtype=centred.dtype, device=centred.device)
    return m * ((unit**2).sum(dim=dim, keepdim=True) / (n - 1).clamp(min=1)).sqrt()


def _check_mask(values_t: Tensor, mask_t: Tensor, name: str) -> None:
    if values_t.dim() != 3:
        raise ValueError(f"{name} must be shaped (num_groups, G, T), got {tuple(values_t.shape)}")
    if mask_t.shape != values_t.shape:
        raise ValueError(f"mask shape {tuple(mask_t.shape)} differs from {name} shape {tuple(values_t.shape)}")


def outcome_advantages(rewards: Tensor, scale_by_std: bool = True, level: str = "group") -> Tensor:
    """``A_i = (r_i - mean(r)) / std(r)`` over each group (outcome supervision).

    Args:
        rewards: ``(num_groups, G)``, one scalar reward per output.
        scale_by_std: divide by the group's standard deviation (Bessel-corrected, as
            ``torch.std``); ``False`` gives Dr. GRPO's mean-centred rewards.
        level: ``"group"`` divides by each group's std; ``"batch"`` by the std of all the rewards
            given (PPO Lite, arXiv 2508.08221; TRL's ``scale_rewards="batch"``), centring still
            per group: ``A_i = (r_i - mean_group(r)) / std_batch(r)``.

    Returns:
        ``(num_groups, G)`` advantages; 0 for every member of a group whose rewards are equal.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be shaped (num_groups, G), got {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(f"a group needs at least 2 outputs to compare, got G={rewards.shape[1]}")
    rewards = rewards.float()
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    flat = all_equal(rewards, None, 1)
    if scale_by_std and level == "batch":
        std = rewards.std()
        centred = centred / torch.where(flat.all() | (std == 0), torch.ones_like(std), std)
    elif scale_by_std:
        std = centred_std(centred, rewards.shape[1], 1)
        centred = centred / torch.where(flat, torch.ones_like(std), std)
    return torch.where(flat, torch.zeros_like(centred), centred)


def _nan_group_normalise(values: Tensor) -> Tensor:
    """``(x - mean) / std`` along dim 1 over the members that are not NaN (Bessel std), 0 where a
    value is NaN and for a group whose values are all equal (or fewer than two)."""
    known = ~torch.isnan(values)
    x = torch.where(known, values, torch.zeros_like(values))
    n = known.sum(1, keepdim=True)
    mean = x.sum(1, keepdim=True) / n.clamp(min=1)
    centred = torch.where(known, x - mean, torch.zeros_like(x))
    std = centred_std(centred, n, 1)
    flat = all_equal(x, known, 1)
    return torch.where(flat, torch.zeros_like(x), centred / torch.where(flat, torch.ones_like(std), std))


def gdpo_advantages(components: Tensor, weights: Tensor | None = None) -> Tensor:
    """GDPO's decoupled normalisation of several rewards (arXiv 2601.05242; TRL's
    ``multi_objective_aggregation="normalize_then_sum"``).

    Each reward function k is normalised within each group on its own,
    ``z_ik = (r_ik - mean_g(r_k)) / std_g(r_k)``, the weighted sum ``s_i = sum_k w_k z_ik`` is
    formed, and the advantage is ``s`` normalised over the whole batch, ``A_i = (s_i - mean(s)) / std(s)``:
    a function whose rewards spread widely cannot drown the others' signal.

    Args:
        components: ``(num_groups, G, K)`` each function's reward (NaN where it gave none: that
            term counts 0).
        weights: ``(K,)``, default all 1.

    Returns:
        ``(num_groups, G)`` advantages; a group whose members all score alike on every function
        gets 0, and so does everything when the sums are all equal.
    """
    if components.dim() != 3:
        raise ValueError(f"components must be shaped (num_groups, G, K), got {tuple(components.shape)}")
    z = _nan_group_normalise(components.float())
    w = torch.ones(components.shape[-1]) if weights is None else torch.as_tensor(weights, dtype=torch.float32)
    sums = (z * w.to(z.device)).sum(-1)
    flat = all_equal(sums.reshape(1, -1), None, 1)
    centred = sums - sums.mean()
    return torch.where(flat, torch.zeros_like(centred), centred / torch.where(flat, torch.ones(()), sums.std()))


def kl_penalised_rewards(rewards: Tensor, kl_t: Tensor, mask_t: Tensor, beta: float) -> Tensor:
    """verl's ``use_kl_in_reward``: the KL enters the reward instead of the loss. Per step,
    ``r_t - beta KL_t`` (``rewards`` and ``kl_t`` shaped ``(B, T)``); per output,
    ``r_i - beta sum_t KL_it`` over its masked tokens (``rewards`` shaped ``(B,)``). ``kl_t``
    carries no gradient."""
    kl_t = torch.where(mask_t.bool(), kl_t.detach().float(), torch.zeros_like(kl_t, dtype=torch.float32))
    if rewards.dim() == 2:
        return rewards.float() - beta * kl_t
    return rewards.float() - beta * kl_t.sum(-1)


def broadcast_outcome(advantages: Tensor, mask_t: Tensor) -> Tensor:
    """Give every token of output i its output's advantage: ``(B,) x (B, T) -> (B, T)``."""
    return advantages.reshape(-1, 1) * mask_t


def _reverse_cumsum(x_t: Tensor) -> Tensor:
    return x_t.flip(-1).cumsum(-1).flip(-1)


def discounted_returns(r_t: Tensor, gamma: float = 1.0) -> Tensor:
    """Returns-to-go ``R_t = sum_{t' >= t} gamma^(t'-t) r_t'`` along the last axis.

    One reversed cumulative sum in float64, ``R_t = revcumsum(r_t' gamma^t') / gamma^t``,
    instead of a Python loop over T (one vectorised pass, not T small ones).
    Where ``gamma^T`` would underflow float64 the loop is used instead.
    """
    if gamma == 1.0:
        return _reverse_cumsum(r_t)
    T = r_t.shape[-1]
    if T * math.log10(gamma) > -250:
        w = gamma ** torch.arange(T, dtype=torch.float64, device=r_t.device)
        return (_reverse_cumsum(r_t.double() * w) / w).to(r_t.dtype)
    ret_t = torch.zeros_like(r_t)
    running = torch.zeros_like(r_t[..., 0])
    for t in range(T - 1, -1, -1):
        running = r_t[..., t] + gamma * running
        ret_t[..., t] = running
    return ret_t


def process_advantages(step_rewards_t: Tensor, mask_t: Tensor) -> Tensor:
    """Process supervision as in the paper (section 4.1.3).

    Every step reward is normalised by the mean and std of *all* step rewards of its group
    (valid steps only); the advantage of step t is the sum of the normalised rewards of the
    steps at or after t in the same output.

    Where every step of a group pays the same reward (CartPole pays 1 per step), the
    normalised rewards are all 0 and so is every advantage: use
    :func:`stepwise_return_advantages` for such tasks.

    Args:
        step_rewards_t: ``(num_groups, G, T)`` reward of each step.
        mask_t: ``(num_groups, G, T)``, 1 where the step is part of the output.

    Returns:
        ``(num_groups, G, T)`` advantages, 0 on masked-out steps.
    """
    _check_mask(step_rewards_t, mask_t, "step_rewards_t")
    mask_t = mask_t.float()
    r_t = step_rewards_t.float() * mask_t
    n = mask_t.sum(dim=(1, 2), keepdim=True)
    mean = r_t.sum(dim=(1, 2), keepdim=True) / n.clamp(min=1)
    std = centred_std((r_t - mean) * mask_t, n, (1, 2))
    flat = all_equal(r_t, mask_t, (1, 2))
    normed_t = (r_t - mean) / torch.where(flat, torch.ones_like(std), std) * mask_t
    normed_t = torch.where(flat, torch.zeros_like(normed_t), normed_t)
    return _reverse_cumsum(normed_t) * mask_t


def stepwise_return_advantages(
    step_rewards_t: Tensor, mask_t: Tensor, gamma: float = 1.0, scale_by_std: bool = True, absorb_ended: bool = False,
    level: str = "group",
) -> Tensor:
    """Per-step advantages that compare group members at the same step index.

    The return-to-go ``R_it = sum_{t' >= t} gamma^(t'-t) r_it'`` of member i at step t is
    normalised by the mean and std of the returns-to-go of the members still running at step t
    (same start state, same elapsed time, so the comparison is fair). Unlike
    :func:`process_advantages` this carries signal where every step pays the same reward: a
    member that survives longer has a larger return-to-go than its peers at every step.

    A step where fewer than two members are running, or where all running members have the
    same return-to-go, gets advantage 0.

    With ``absorb_ended`` a member whose episode has ended stays in the comparison at every later
    step of its group, with return-to-go 0 (an ended episode sits in an absorbing state that pays
    nothing). The members that run on are then compared with it rather than with nobody: a
    member that lingers where the others have finished (hovering, jittering on the ground)
    learns whether its remaining steps pay more or less than stopping would. Without it, every
    step past the second-longest member's end has advantage 0 and is never trained.

    Args:
        step_rewards_t: ``(num_groups, G, T)`` reward of each step.
        mask_t: ``(num_groups, G, T)``, 1 where the step is part of the output.
        gamma: discount inside the return-to-go.
        scale_by_std: divide by the per-step std (Bessel-corrected); ``False`` only centres.
        absorb_ended: compare at step t every member of a group in which anyone is still running,
            an ended member with ``R_it = 0``.
        level: with ``scale_by_std``, ``group``: each group's std at each step, as above;
            ``batch``: one std of every centred return-to-go compared in the batch,
            ``sigma = sqrt(sum c_it^2 / (N - 1))`` over its N compared steps (the centring keeps
            their mean at 0), as PPO normalises its advantages over a batch (PPO Lite, arXiv
            2508.08221). Differences keep their sizes relative to one another: a step whose
            members differ only by a reward far in the discounted future no longer weighs as
            much as one whose members differ now.

    Returns:
        ``(num_groups, G, T)`` advantages, 0 on masked-out steps.
    """
    _check_mask(step_rewards_t, mask_t, "step_rewards_t")
    mask_t = mask_t.float()
    r_t = step_rewards_t.float() * mask_t
    ret_t = discounted_returns(r_t, gamma)  # 0 past a member's end: its rewards there are masked out
    # the members compared at step t: those running or, with absorb_ended, all of a group still going
    cmp_t = mask_t.amax(dim=1, keepdim=True).expand_as(mask_t) if absorb_ended else mask_t
    n = cmp_t.sum(dim=1, keepdim=True)  # (num_groups, 1, T)
    mean = (ret_t * cmp_t).sum(dim=1, keepdim=True) / n.clamp(min=1)
    centred_t = (ret_t - mean) * cmp_t
    flat = all_equal(ret_t, cmp_t, 1)  # also True where fewer than two members are compared
    centred_t = torch.where(flat, torch.zeros_like(centred_t), centred_t)
    if scale_by_std and level == "batch":
        std = centred_std(centred_t, cmp_t.sum(), (0, 1, 2))
        centred_t = centred_t / torch.where(std > 0, std, torch.ones_like(std))
    elif scale_by_std:
        std = centred_std(centred_t, n, 1)
        centred_t = centred_t / torch.where(flat, torch.ones_like(std), std)
    return centred_t * mask_t


def anchor_states(obs_t: Tensor, mask_t: Tensor) -> Tensor:
    """GiGPO's anchor states (Feng et al. 2025, arXiv 2505.10978, eq. 6): ``(num_groups, G, T, D)``
    observations to ``(num_groups, G, T)`` ids, equal exactly where two steps of one group (any
    members, any step indices) saw the same observation vector; -1 outside ``mask_t``."""
    n, g, t, d = obs_t.shape
    group = torch.arange(n, device=obs_t.device, dtype=obs_t.dtype).view(n, 1, 1, 1).expand(n, g, t, 1)
    rows = torch.cat([group, obs_t], dim=-1).reshape(-1, d + 1)
    ids = torch.unique(rows, dim=0, return_inverse=True)[1].reshape(n, g, t)
    return torch.where(mask_t.bool(), ids, torch.full_like(ids, -1))


def anchor_step_advantages(returns_t: Tensor, mask_t: Tensor, anchors_t: Tensor, scale_by_std: bool = False) -> Tensor:
    """GiGPO's step-relative advantages (arXiv 2505.10978, eq. 7): the steps that share an anchor
    state form a step group, and each is compared with the others from that same state,

        ``A^S_k = (R_k - mean_{j in S(k)} R_j) / F``,  F = the step group's Bessel std or 1,

    where ``R`` is a step's return-to-go (:func:`discounted_returns`, eq. 5) and ``S(k)`` the steps
    whose anchor id (:func:`anchor_states`) is ``k``'s. What GRPO's group baseline cannot give a
    step in the middle of an episode, a baseline at that very state, comes from the batch itself:
    no critic. A step group of one, or of equal returns, gets 0 (so do continuous states past the
    start state a group shares: they never repeat exactly). ``(num_groups, G, T)`` in and out, 0
    outside ``mask_t``.
    """
    _check_mask(returns_t, mask_t, "returns_t")
    keep = mask_t.bool() & (anchors_t >= 0)
    ids, ret = anchors_t[keep], returns_t[keep].double()
    out = torch.zeros_like(returns_t)
    if ids.numel() == 0:
        return out
    _, inv, count = torch.unique(ids, return_inverse=True, return_counts=True)
    k = count.numel()
    mean = ret.new_zeros(k).index_add_(0, inv, ret) / count
    hi = ret.new_full((k,), -math.inf).scatter_reduce(0, inv, ret, "amax")
    lo = ret.new_full((k,), math.inf).scatter_reduce(0, inv, ret, "amin")
    flat = (hi == lo)[inv]
    centred = torch.where(flat, torch.zeros_like(ret), ret - mean[inv])
    if scale_by_std:
        std = (ret.new_zeros(k).index_add_(0, inv, centred**2) / (count - 1).clamp(min=1)).sqrt()[inv]
        centred = torch.where(flat, centred, centred / torch.where(std > 0, std, torch.ones_like(std)))
    out[keep] = centred.to(out.dtype)
    return out


def scale_and_level(config: "LoopConfig") -> tuple[bool, str]:
    """``config.scale_rewards`` (group, batch or none) as the math's two arguments: whether to
    divide by a std, and over what."""
    return config.scale_rewards != "none", "group" if config.scale_rewards == "none" else config.scale_rewards


def compute_advantages(batch: "RolloutBatch", config: "LoopConfig", reward_weights: Tensor | None = None) -> Tensor:
    """Per-token advantages ``(B, T)`` of a group-major batch: :func:`group_advantages`, plus, with
    ``config.step_advantage_w`` > 0, that many times GiGPO's step advantages at anchor states
    (eq. 8 of arXiv 2505.10978, ``A = A^E + w A^S``: :func:`anchor_advantages`)."""
    adv = group_advantages(batch, config, reward_weights)
    w = getattr(config, "step_advantage_w", 0.0)
    return adv + w * anchor_advantages(batch, config) if w else adv


def anchor_advantages(batch: "RolloutBatch", config: "LoopConfig") -> Tensor:
    """:func:`anchor_step_advantages` of a batch, ``(B, T)``: an env rollout's anchors are its
    observations; a text environment's, the observation each turn answers (``batch.step_anchor``),
    compared turn by turn and given to every token of the turn. Returns-to-go are discounted by
    ``config.gamma`` and divided by the step group's std where ``config.scale_rewards`` (GiGPO's
    mean_std_norm; else its mean_norm)."""
    if batch.step_rewards is None or not (batch.one_observation_per_token or batch.step_anchor is not None):
        raise ValueError("LoopConfig.step_advantage_w: anchor states need an env rollout or a text environment's "
                         "turns (an observation and a reward per step); set step_advantage_w=0")
    mask, r_t = batch.mask, batch.step_rewards.float()
    if batch.step_index is not None:  # a text env: per-turn rewards, mask and anchors
        keep = mask.bool() & (batch.step_index >= 0)
        r_t, m_t = steps_of_tokens(r_t, mask, batch.step_index)
        idx = torch.where(keep, batch.step_index, 0)
        obs = torch.full(m_t.shape, -1, dtype=torch.long, device=idx.device).scatter_reduce(
            1, idx, torch.where(keep, batch.step_anchor, -1), "amax").unsqueeze(-1).double()
    else:
        m_t, obs = mask, batch.context
    shape = (batch.num_groups, batch.num_generations, r_t.shape[1])
    m_t = m_t.reshape(shape)
    ret_t = discounted_returns(r_t * m_t.reshape(r_t.shape).float(), config.gamma).reshape(shape)
    anchors_t = anchor_states(obs.reshape(*shape, -1), m_t)
    adv_t = anchor_step_advantages(ret_t, m_t, anchors_t, scale_and_level(config)[0]).reshape(batch.batch_size, -1)
    if batch.step_index is None:
        return adv_t
    return adv_t.gather(1, idx) * keep


def group_advantages(batch: "RolloutBatch", config: "LoopConfig", reward_weights: Tensor | None = None) -> Tensor:
    """Per-token advantages ``(B, T)`` of a group-major batch, as ``config.advantage`` says:
    ``outcome`` from ``batch.rewards`` (or, with ``multi_objective_aggregation=normalize_then_sum``,
    from ``batch.reward_components`` and ``reward_weights``: :func:`gdpo_advantages`),
    ``process`` or ``stepwise`` from ``batch.step_rewards`` (``config.scale_rewards``,
    ``config.gamma`` and ``config.absorb_ended`` apply as in the
    functions above)."""
    G, mask = batch.num_generations, batch.mask
    if config.advantage == "outcome" and getattr(config, "multi_objective_aggregation", "") == "normalize_then_sum":
        if batch.reward_components is None:
            raise ValueError("LoopConfig.multi_objective_aggregation='normalize_then_sum' needs each reward function's "
                             "values (batch.reward_components); this sampler gives one reward only")
        comps = batch.reward_components.reshape(-1, G, batch.reward_components.shape[-1])
        return broadcast_outcome(gdpo_advantages(comps, reward_weights).reshape(-1), mask.float())
    if config.advantage == "outcome":
        scale, level = scale_and_level(config)
        adv = outcome_advantages(batch.rewards.reshape(-1, G), scale, level).reshape(-1)
        return broadcast_outcome(adv, mask.float())
    if batch.step_rewards is None:
        raise ValueError(f"LoopConfig.advantage={config.advantage!r} needs per-step rewards; this sampler gives none")
    r_t, m_t = batch.step_rewards, mask
    if batch.step_index is not None:  # a step spans several tokens (a text env's turn): compare steps
        r_t, m_t = steps_of_tokens(r_t, m_t, batch.step_index)
    shape = (batch.num_groups, G, r_t.shape[-1])
    r_t, m_t = r_t.reshape(shape), m_t.reshape(shape)
    if config.advantage == "process":
        adv_t = process_advantages(r_t, m_t)
    else:
        scale, level = scale_and_level(config)
        adv_t = stepwise_return_advantages(r_t, m_t, config.gamma, scale, config.absorb_ended, level)
    adv_t = adv_t.reshape(batch.batch_size, -1)
    if batch.step_index is not None:  # each token gets its step's advantage
        keep = mask.bool() & (batch.step_index >= 0)
        return adv_t.gather(1, torch.where(keep, batch.step_index, 0)) * keep
    return adv_t


def steps_of_tokens(step_rewards_t: Tensor, mask_t: Tensor, step_index_t: Tensor) -> tuple[Tensor, Tensor]:
    """Per-step rewards and mask ``(B, S)`` from per-token ones ``(B, T)`` where a step spans
    several tokens (a text environment's turn): ``r_is = sum_{t in step s} r_it`` (the sampler puts
    a turn's reward on its last token) and ``m_is = 1`` where member i has a token of step s.
    ``step_index_t`` holds each token's step, -1 outside the output; S is the most steps of any member."""
    keep = mask_t.bool() & (step_index_t >= 0)
    S = int(step_index_t[keep].max()) + 1 if keep.any() else 1
    idx = torch.where(keep, step_index_t, 0)
    r_s = step_rewards_t.new_zeros(step_rewards_t.shape[0], S).scatter_add(1, idx, torch.where(keep, step_rewards_t, 0.0))
    m_s = torch.zeros(keep.shape[0], S, device=keep.device).scatter_add(1, idx, keep.float()) > 0
    return r_s, m_s


def shared_advantages(advantages: Tensor, mask: Tensor, owner: Tensor, extra_mask: Tensor) -> Tensor:
    """The per-token advantages of more sequences of the batch's outputs (an agent whose history
    was rewritten): each sequence ``e`` takes the mean advantage of its output ``o = owner[e]``
    over that output's tokens, at each of its own tokens.

        A_e,t = m_e,t * (sum_t' A_o,t' m_o,t') / max(1, sum_t' m_o,t')

    An outcome advantage is one number across an output's tokens: each sequence gets that number.
    ``advantages``, ``mask``: ``(B, T)``; ``owner``: ``(E,)`` rows of them; ``extra_mask``: ``(E, T')``."""
    m = mask.float()
    per_output = (advantages * m).sum(-1) / m.sum(-1).clamp(min=1.0)
    return per_output[owner].unsqueeze(-1) * extra_mask.float()
