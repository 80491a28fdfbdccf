"""The GRPO objective against hand-computed numbers; the working is in the comments."""

import math

import pytest
import torch

from grpo_seq.math.objective import (
    aggregate,
    clipped_mask,
    clipped_surrogate,
    grpo_loss,
    k3_kl,
    probability_ratio,
    token_entropy,
    token_logprobs,
)


def test_token_logprobs_and_entropy():
    # logits [0, ln 3] -> probabilities [1/4, 3/4]
    logits = torch.tensor([[0.0, math.log(3.0)]])
    torch.testing.assert_close(token_logprobs(logits, torch.tensor([1])), torch.tensor([math.log(0.75)]))
    torch.testing.assert_close(token_logprobs(logits, torch.tensor([0])), torch.tensor([math.log(0.25)]))
    # H = -(1/4 ln 1/4 + 3/4 ln 3/4)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(token_entropy(logits), torch.tensor([h]))


def test_probability_ratio():
    # pi_theta = 0.6, pi_old = 0.3 -> r = 2
    r = probability_ratio(torch.tensor([math.log(0.6)]), torch.tensor([math.log(0.3)]))
    torch.testing.assert_close(r, torch.tensor([2.0]))


def test_k3_kl_zero_when_equal_and_positive_otherwise():
    logp = torch.log(torch.tensor([0.5, 0.5, 0.5]))
    ref = torch.log(torch.tensor([0.5, 0.25, 0.9]))
    kl = k3_kl(logp, ref)
    assert kl[0] == 0
    # token 1: pi_ref/pi = 0.5 -> 0.5 - ln 0.5 - 1 = ln 2 - 0.5
    # token 2: pi_ref/pi = 1.8 -> 1.8 - ln 1.8 - 1 = 0.8 - ln 1.8
    torch.testing.assert_close(kl[1:], torch.tensor([math.log(2) - 0.5, 0.8 - math.log(1.8)]))
    assert (kl[1:] > 0).all()


def test_clipped_surrogate_values():
    # eps = 0.2: clip range [0.8, 1.2]
    r = torch.tensor([0.5, 1.0, 1.5])
    # A = +1: min(r, clip(r)) = [min(.5, .8), 1, min(1.5, 1.2)] = [.5, 1, 1.2]
    torch.testing.assert_close(clipped_surrogate(r, torch.ones(3), 0.2), torch.tensor([0.5, 1.0, 1.2]))
    # A = -1: min(-r, -clip(r)) = [min(-.5, -.8), -1, min(-1.5, -1.2)] = [-.8, -1, -1.5]
    torch.testing.assert_close(clipped_surrogate(r, -torch.ones(3), 0.2), torch.tensor([-0.8, -1.0, -1.5]))
    # clip-higher: eps_high = 0.6 lets r = 1.5 through with A > 0
    torch.testing.assert_close(clipped_surrogate(r, torch.ones(3), 0.2, 0.6), torch.tensor([0.5, 1.0, 1.5]))


def test_clipping_removes_the_gradient_exactly_where_the_formula_says():
    # ratios around both clip edges, each with A = +1 and A = -1
    r0 = torch.tensor([0.5, 0.9, 1.1, 1.5, 0.5, 0.9, 1.1, 1.5])
    adv = torch.tensor([1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0])
    logp = torch.log(r0).requires_grad_(True)  # old logp = 0, so r = exp(logp) = r0
    clipped_surrogate(probability_ratio(logp, torch.zeros(8)), adv, 0.2).sum().backward()
    # Clipped (zero gradient): A > 0 and r > 1.2 (index 3); A < 0 and r < 0.8 (index 4).
    # Elsewhere d(r A)/d logp = r A.
    expected = r0 * adv
    expected[3] = 0.0
    expected[4] = 0.0
    torch.testing.assert_close(logp.grad, expected)
    assert clipped_mask(r0, adv, 0.2).tolist() == [False, False, False, True, True, False, False, False]


def test_aggregation_counts_only_each_outputs_own_tokens():
    # two outputs: [1, 2, 3] and [4, <pad>, <pad>]; padding holds junk that must not count
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 1e6, float("inf")]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    # grpo: mean over own tokens, then over outputs: (6/3 + 4/1) / 2 = 3
    assert aggregate(v, m, "grpo").item() == pytest.approx(3.0)
    # bnpo: (1 + 2 + 3 + 4) / 4 tokens = 2.5
    assert aggregate(v, m, "bnpo").item() == pytest.approx(2.5)
    # dr_grpo: 10 / (2 outputs * max_len 4) = 1.25
    assert aggregate(v, m, "dr_grpo", max_len=4).item() == pytest.approx(1.25)
    with pytest.raises(ValueError, match="unknown loss_type 'nope'"):
        aggregate(v, m, "nope")


def test_ratio_one_and_beta_zero_gives_minus_mean_advantage():
    # mu = 1: old logp = current logp -> ratio 1 -> objective = A on every token.
    # Outputs of lengths 3 and 1 with advantages 0.5 and -1.5:
    # loss = -mean_i(mean_t A_i) = -(0.5 - 1.5) / 2 = 0.5
    logp = torch.log(torch.tensor([[0.2, 0.3, 0.4], [0.7, 0.1, 0.1]])).requires_grad_(True)
    m = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([[0.5, 0.5, 0.5], [-1.5, -1.5, -1.5]])
    loss, stats = grpo_loss(logp, logp.detach(), adv, m, eps_low=0.2)
    assert loss.item() == pytest.approx(0.5)
    assert stats["ratio"].item() == 1.0 and stats["clip_fraction"].item() == 0.0
    # And the gradient is the policy gradient: d loss / d logp_it = -A_i / |o_i| / G
    loss.backward()
    expected = torch.tensor([[-0.5 / 3 / 2] * 3, [1.5 / 2, 0.0, 0.0]])
    torch.testing.assert_close(logp.grad, expected)


def test_kl_term_enters_with_beta():
    # One output, one token: A = 1, ratio 1, pi = 0.5, pi_ref = 0.25
    # KL = 0.5 - ln 0.5 - 1 = ln 2 - 0.5; loss = -(1 - beta * KL)
    logp = torch.log(torch.tensor([[0.5]]))
    ref = torch.log(torch.tensor([[0.25]]))
    m = torch.ones(1, 1, dtype=torch.bool)
    loss, stats = grpo_loss(logp, logp, torch.ones(1, 1), m, eps_low=0.2, beta=0.1, ref_logp_t=ref)
    kl = math.log(2) - 0.5
    assert loss.item() == pytest.approx(-(1 - 0.1 * kl))
    assert stats["kl"].item() == pytest.approx(kl)
    with pytest.raises(ValueError, match="reference"):
        grpo_loss(logp, logp, torch.ones(1, 1), m, eps_low=0.2, beta=0.1)


def test_entropy_bonus_enters_with_ent_coef_and_raises_entropy():
    # Two outputs (lengths 2 and 1), ratio 1, A = 0: the clipped term is 0 and its gradient too,
    # so the loss is -ent_coef * aggregate(H). Entropies 0.5, 0.3 | 0.9; grpo aggregation:
    # mean_i(mean_t H) = ((0.5 + 0.3) / 2 + 0.9) / 2 = 0.65 -> loss = -0.1 * 0.65 = -0.065.
    logits = torch.tensor([[[2.0, 0.0], [0.0, 1.0]], [[0.3, 0.0], [0.0, 0.0]]], requires_grad=True)
    logp = token_logprobs(logits, torch.zeros(2, 2, dtype=torch.long))
    ent = token_entropy(logits)
    m = torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
    loss, _ = grpo_loss(logp, logp.detach(), torch.zeros(2, 2), m, eps_low=0.2, ent_coef=0.1, entropy_t=ent)
    expected = -0.1 * ((ent[0, 0] + ent[0, 1]) / 2 + ent[1, 0]) / 2
    assert loss.item() == pytest.approx(expected.item())
    # Minimising it moves the most confident row (logits 2, 0) toward uniform: its gap shrinks.
    loss.backward()
    assert logits.grad[0, 0, 0] > 0 > logits.grad[0, 0, 1]
    # Without the coefficient the entropy is ignored; with it but no entropies, refused.
    plain, _ = grpo_loss(logp, logp.detach(), torch.zeros(2, 2), m, eps_low=0.2, entropy_t=ent)
    assert plain.item() == 0.0
    with pytest.raises(ValueError, match="entropies"):
        grpo_loss(logp, logp.detach(), torch.zeros(2, 2), m, eps_low=0.2, ent_coef=0.1)
