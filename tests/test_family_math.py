"""The GRPO family's math, each option against numbers worked by hand (the working in comments):
KL estimators, GSPO's sequence ratio, two-sided clipping, CISPO, SAPO, VESPO, the off-policy and
high-entropy masks, the DAPO and LUSPO reductions, TRL's entropy bonus and its adaptive
coefficient, batch-level reward scaling, GDPO, the KL in the reward and TR-DPO's reference mix."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from grpo_seq.math.advantages import gdpo_advantages, kl_penalised_rewards, outcome_advantages
from grpo_seq.loop.entropy_control import EntropyControl
from grpo_seq.math.objective import (LossVariant, aggregate, cispo_objective, clipped_surrogate, entropy_bonus, grpo_loss,
                                high_entropy_mask, importance_ratio, kl_estimate, off_policy_mask, sapo_objective,
                                sequence_log_ratio, vespo_weights)
from grpo_seq.loop.reference import mix_reference

LN2 = math.log(2.0)


def t(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_kl_estimators_by_hand():
    # l = log(pi / pi_ref) = ln 2: k1 = ln 2 = 0.693147; k2 = (ln 2)^2 / 2 = 0.240227;
    # k3 = e^-l + l - 1 = 0.5 + 0.693147 - 1 = 0.193147
    logp, ref = t([LN2]), t([0.0])
    assert kl_estimate(logp, ref, "k1").item() == pytest.approx(0.693147, abs=1e-6)
    assert kl_estimate(logp, ref, "k2").item() == pytest.approx(0.240227, abs=1e-6)
    assert kl_estimate(logp, ref, "k3").item() == pytest.approx(0.193147, abs=1e-6)
    # gradients in l: dk1/dl = 1, dk2/dl = l = ln 2, dk3/dl = 1 - e^-l = 0.5
    for name, want in (("k1", 1.0), ("k2", LN2), ("k3", 0.5)):
        x = logp.clone().requires_grad_(True)
        kl_estimate(x, ref, name).sum().backward()
        assert x.grad.item() == pytest.approx(want, abs=1e-6)
    with pytest.raises(ValueError, match="k4"):
        kl_estimate(logp, ref, "k4")


def test_sequence_level_ratio_is_the_exp_of_the_mean_token_log_ratio():
    # output 0: log ratios 0.2, 0.4, (padding 9) -> mean 0.3; output 1: one token, -0.6
    logp, old = t([0.2, 0.4, 9.0], [-0.6, 5.0, 5.0]), torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    torch.testing.assert_close(sequence_log_ratio(logp - old, mask), t([0.3], [-0.6]))
    torch.testing.assert_close(importance_ratio(logp, old, mask, "sequence"), t([math.exp(0.3)], [math.exp(-0.6)]))
    torch.testing.assert_close(importance_ratio(logp, old, mask, "token"), torch.exp(logp))


def test_two_sided_clipping_caps_the_ratio_of_a_negative_advantage():
    # r = 3, A = -1, eps = 0.2: one-sided min(3 * -1, 1.2 * -1) = -3; with delta = 1.5: min(1.5 * -1, -1.2) = -1.5
    r, a = t([3.0]), t([-1.0])
    assert clipped_surrogate(r, a, 0.2).item() == -3.0
    assert clipped_surrogate(r, a, 0.2, delta=1.5).item() == -1.5
    # a positive advantage is clipped as before: min(3 * 1, 1.2 * 1) = 1.2 either way
    assert clipped_surrogate(r, -a, 0.2, delta=1.5).item() == pytest.approx(1.2)


def test_cispo_clips_the_detached_weight_and_keeps_every_gradient():
    # r = 2 capped at eps_max 1.5, A = 1, log pi = -0.5: 1.5 * 1 * -0.5 = -0.75; d/dlogp = 1.5 (weight detached)
    logp = t([-0.5]).requires_grad_(True)
    ratio = torch.exp(logp - t([-0.5 - LN2]))  # = 2, and carries a gradient that CISPO must drop
    out = cispo_objective(ratio, t([1.0]), logp, eps_max=1.5)
    out.sum().backward()
    assert out.item() == pytest.approx(-0.75) and logp.grad.item() == pytest.approx(1.5)


def test_sapo_gate_is_the_surrogate_at_ratio_one_with_slope_one():
    # f(1) = 4/tau sigmoid(0) = 2/tau: tau_pos = 1 -> 2 A; tau_neg = 2 (A = -1) -> -1
    r = t([1.0, 1.0]).requires_grad_(True)
    out = sapo_objective(r, t([1.0, -1.0]), tau_pos=1.0, tau_neg=2.0)
    torch.testing.assert_close(out.detach(), t([2.0, -1.0]))
    # d f / d r at r = 1: 4/tau * tau * sigmoid'(0) = 4 * 0.25 = 1, times A
    out.sum().backward()
    torch.testing.assert_close(r.grad, t([1.0, -1.0]))


def test_vespo_gamma_weight_by_hand():
    # log w = sum of token log ratios = ln 2 (0.5 ln 2 twice); A >= 0: k = 2, lambda = 3:
    # phi = e^3 * 2^2 * e^(-3 * 2) = 4 e^-3 = 0.199148. With w = 1 (log ratios 0): phi = e^3 e^-3 = 1.
    mask = torch.ones(2, 2, dtype=torch.bool)
    phi = vespo_weights(t([0.5 * LN2, 0.5 * LN2], [0.0, 0.0]), t([1.0, 1.0], [-1.0, -1.0]), mask)
    torch.testing.assert_close(phi, t([4 * math.exp(-3)] * 2, [1.0, 1.0]))


def test_off_policy_mask_drops_negative_far_off_policy_sequences_only():
    # mean(log q - log pi) over tokens: row 0 (0.6 + 0.2) / 2 = 0.4 > 0.3 with A < 0: dropped;
    # row 1 the same drift with A > 0: kept; row 2 drift 0.1 <= 0.3 with A < 0: kept
    logp = torch.zeros(3, 2)
    q = t([0.6, 0.2], [0.6, 0.2], [0.1, 0.1])
    adv = t([-1.0], [1.0], [-1.0])
    keep = off_policy_mask(adv, logp, q, torch.ones(3, 2, dtype=torch.bool), threshold=0.3)
    torch.testing.assert_close(keep, t([0.0], [1.0], [1.0]))


def test_high_entropy_mask_keeps_the_top_quantile():
    # entropies 1, 2, 3, 4 (and 9 in padding): the 0.5 quantile is 2.5 -> keep 3 and 4; rho = 0 keeps the max only
    h = t([1.0, 2.0, 3.0], [4.0, 9.0, 9.0])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    assert high_entropy_mask(h, mask, 0.5).tolist() == [[False, False, True], [True, False, False]]
    assert high_entropy_mask(h, mask, 0.0).tolist() == [[False, False, False], [True, False, False]]
    assert high_entropy_mask(h, mask, 1.0).tolist() == mask.tolist()


def test_dapo_and_luspo_reductions():
    # values 1, 2 | 3 (row 1 has one token): dapo = 6 / num_tokens (3 alone, 12 as a larger step's count);
    # luspo = per-output sums (3, 3) averaged = 3
    v, m = t([1.0, 2.0], [3.0, 7.0]), torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
    assert aggregate(v, m, "dapo").item() == 2.0
    assert aggregate(v, m, "dapo", num_tokens=12).item() == 0.5
    assert aggregate(v, m, "luspo").item() == 3.0
    assert aggregate(v, m, "cispo").item() == aggregate(v, m, "vespo").item() == 2.0
    assert aggregate(v, m, "sapo").item() == aggregate(v, m, "grpo").item() == 2.25  # (1.5 + 3) / 2


def test_entropy_bonus_is_a_token_mean_shared_across_micro_batches():
    # H = 1, 3 on two tokens: mean 2. As a micro-batch of a 4-token minibatch: 2 * 2/4 = 1
    h, m = t([1.0, 3.0]), torch.ones(1, 2, dtype=torch.bool)
    assert entropy_bonus(h[None], m).item() == 2.0
    assert entropy_bonus(h[None], m, num_tokens=4).item() == 1.0
    # in grpo_loss with A = 0 and coefficient 0.1 the loss is -0.1 * 2 = -0.2, whatever the loss type
    zeros = torch.zeros(1, 2)
    for loss_type in ("grpo", "dr_grpo", "luspo"):
        loss, _ = grpo_loss(zeros, zeros, zeros, m, eps_low=0.2, loss_type=loss_type, entropy_t=h[None],
                            variant=LossVariant(entropy_coef=0.1))
        assert loss.item() == pytest.approx(-0.2)


def test_bias_corrected_kl_multiplies_by_the_ratio():
    # one token, r = 2 (logp = ln 2 over old 0), A = 0, ref = 0: k3 = 0.193147; corrected 2 * 0.193147
    logp, zero, m = t([LN2]), torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool)
    plain, _ = grpo_loss(logp, zero, zero, m, eps_low=0.2, beta=1.0, ref_logp_t=zero)
    fixed, _ = grpo_loss(logp, zero, zero, m, eps_low=0.2, beta=1.0, ref_logp_t=zero,
                         variant=LossVariant(use_bias_correction_kl=True))
    assert plain.item() == pytest.approx(0.193147, abs=1e-6) and fixed.item() == pytest.approx(0.386294, abs=1e-6)


def test_batch_level_reward_scaling():
    # rewards [0, 1] and [0, 0]: centred per group [-0.5, 0.5], [0, 0]; batch std of (0, 1, 0, 0)
    # (Bessel) = sqrt((3 * 0.25^2 + 0.75^2) / 3) = 0.5 -> A = [-1, 1], [0, 0] (group std 0.7071 would give +-0.7071)
    r = t([0.0, 1.0], [0.0, 0.0])
    torch.testing.assert_close(outcome_advantages(r, True, "batch"), t([-1.0, 1.0], [0.0, 0.0]))
    torch.testing.assert_close(outcome_advantages(r, True, "group"), t([-0.707107, 0.707107], [0.0, 0.0]))
    assert outcome_advantages(t([2.0, 2.0], [2.0, 2.0]), True, "batch").abs().sum() == 0


def test_gdpo_normalises_each_reward_before_summing():
    # group 1: f1 = (0, 1), f2 = (0, 0); group 2: f1 = (0, 0), f2 = (0, 10). Each function within its group:
    # (0, 1) -> (-0.7071, 0.7071), (0, 10) -> the same, flat -> 0. Sums: +-0.7071 in both groups; over the
    # batch mean 0, Bessel std sqrt(4 * 0.5 / 3) = 0.8165 -> A = +-0.7071 / 0.8165 = +-0.866025
    comps = torch.tensor([[[0.0, 0.0], [1.0, 0.0]], [[0.0, 0.0], [0.0, 10.0]]])
    torch.testing.assert_close(gdpo_advantages(comps), t([-0.866025, 0.866025], [-0.866025, 0.866025]))
    # weights (1, 0) silence f2: sums +-0.7071 and 0, 0 -> mean 0, std sqrt(1 / 3) = 0.57735 -> +-1.224745
    torch.testing.assert_close(gdpo_advantages(comps, torch.tensor([1.0, 0.0])), t([-1.224745, 1.224745], [0.0, 0.0]))
    # a function that scored nobody (NaN) adds nothing
    nan = comps.clone()
    nan[..., 1] = float("nan")
    torch.testing.assert_close(gdpo_advantages(nan), t([-1.224745, 1.224745], [0.0, 0.0]))


def test_kl_in_the_reward_by_hand():
    # beta 0.5; output 0: KL 0.1 + 0.2 -> 1 - 0.15 = 0.85; output 1: KL 0.3 (9 is padding) -> 0 - 0.15 = -0.15
    kl, m = t([0.1, 0.2], [0.3, 9.0]), torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
    torch.testing.assert_close(kl_penalised_rewards(t(1.0, 0.0), kl, m, 0.5), t(0.85, -0.15))
    # per step: r_t - 0.5 KL_t, padding left at its reward
    torch.testing.assert_close(kl_penalised_rewards(torch.ones(2, 2), kl, m, 0.5), t([0.95, 0.9], [0.85, 1.0]))


def test_tr_dpo_mix_moves_the_reference_part_way():
    # reference 0, policy 1, alpha 0.6: 0.6, then 0.6 + 0.4 * 0.6 = 0.84 (TR-DPO's soft update)
    ref, pol = nn.Linear(2, 1), nn.Linear(2, 1)
    nn.init.zeros_(ref.weight), nn.init.zeros_(ref.bias), nn.init.ones_(pol.weight), nn.init.ones_(pol.bias)
    mix_reference(ref, pol, 0.6)
    assert torch.allclose(ref.weight, torch.full((1, 2), 0.6))
    mix_reference(ref, pol, 0.6)
    assert torch.allclose(ref.bias, torch.full((1,), 0.84))


def test_adaptive_entropy_coefficient_by_hand():
    # start 0.01, target 0.5, step 0.01: nothing measured yet -> not applied; H = 0.3 <= 0.5 -> 0.02, applied;
    # H = 0.9 > 0.5 -> back to 0.01 and not applied; floor at coef_min 0.005 after another high H
    c = EntropyControl(coef=0.01, adaptive=True, target=0.5, delta=0.01, coef_min=0.005)
    assert c.applied() == 0.0
    c.update(0.3)
    assert c.coef == pytest.approx(0.02) and c.applied() == pytest.approx(0.02)
    c.update(0.9)
    assert c.coef == pytest.approx(0.01) and c.applied() == 0.0
    c.update(0.9)
    assert c.coef == pytest.approx(0.005)
    fixed = EntropyControl(coef=0.03)
    fixed.update(0.0)
    assert fixed.applied() == 0.03 and fixed.active and not EntropyControl().active
