"""The factorised head of CategoricalMLPPolicy (``action_nvec``): a multi-dimensional discrete
action is one token per decision, scored as the sum of one categorical per dimension (PPO's
MultiCategorical), with numbers worked out by hand."""

import math

import numpy as np
import pytest
import torch

from grpo_seq import CategoricalMLPPolicy, RolloutBatch, load_policy
from grpo_seq.math.objective import grpo_loss
from grpo_seq.policies.mlp import action_digits, join_digits
from grpo_seq.io.serialization import save_policy

# dimension 0: logits [0, ln 3] -> probabilities [1/4, 3/4]; dimension 1: [0, 0, ln 2] -> [1/4, 1/4, 1/2]
BIAS = [0.0, math.log(3.0), 0.0, 0.0, math.log(2.0)]
P0, P1 = [0.25, 0.75], [0.25, 0.25, 0.5]


def _policy() -> CategoricalMLPPolicy:
    """MultiDiscrete([2, 3]) over 6 joint tokens, no hidden layer and zero weights: the logits are the bias."""
    policy = CategoricalMLPPolicy(2, 6, hidden_sizes=(), action_nvec=[2, 3])
    with torch.no_grad():
        policy.net[-1].weight.zero_()
        policy.net[-1].bias.copy_(torch.tensor(BIAS))
    return policy


def _batch(tokens: list[int], mask: list[bool]) -> RolloutBatch:
    """A group of two identical outputs (a batch needs G >= 2)."""
    T = len(tokens)
    return RolloutBatch(context=torch.zeros(2, T, 2), tokens=torch.tensor([tokens] * 2), mask=torch.tensor([mask] * 2),
                        group=torch.zeros(2, dtype=torch.long), num_generations=2, rewards=torch.zeros(2))


def test_the_head_has_one_logit_per_choice_of_each_dimension():
    policy = _policy()
    assert policy.net[-1].out_features == 5  # 2 + 3, not 2 x 3
    assert policy.init_kwargs["action_nvec"] == [2, 3] and policy.init_kwargs["num_actions"] == 6
    plain = CategoricalMLPPolicy(2, 6, hidden_sizes=())
    assert plain.net[-1].out_features == 6 and "action_nvec" not in plain.init_kwargs  # Discrete: as before


def test_tokens_are_mixed_radix_digits_first_dimension_most_significant():
    tokens = np.arange(6)
    digits = action_digits(tokens, [2, 3])
    assert [d.tolist() for d in digits] == [[0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]]
    assert join_digits(digits, [2, 3]).tolist() == tokens.tolist()


def test_logprob_of_a_two_dimensional_action_is_the_sum_of_its_dimensions_log_softmaxes():
    # token 5 = (1, 2): log(3/4) + log(1/2); token 1 = (0, 1): log(1/4) + log(1/4); token 3 = (1, 0)
    logp, entropy = _policy()(_batch([5, 1, 3], [True, True, True]))
    expected = [math.log(0.75 * 0.5), math.log(0.25 * 0.25), math.log(0.75 * 0.25)]
    torch.testing.assert_close(logp[0], torch.tensor(expected))
    h0 = -sum(p * math.log(p) for p in P0)  # 0.5623
    h1 = -sum(p * math.log(p) for p in P1)  # 1.5 ln 2 = 1.0397
    torch.testing.assert_close(entropy[0], torch.full((3,), h0 + h1))
    # the joint distribution these define sums to 1 over the 6 tokens
    every, _ = _policy()(_batch(list(range(6)), [True] * 6))
    assert math.isclose(float(every[0].detach().exp().sum()), 1.0, rel_tol=1e-6)


def test_a_padded_step_takes_no_part_in_the_loss_or_its_gradient():
    """bnpo with ratio 1 and advantage 1: loss = -(1/4) sum over the 2 x 2 real steps; the bias's
    gradient is -(1/2) sum_t (onehot(d_t) - p) per dimension (two identical outputs), whatever token
    the padded step holds."""
    grads = []
    for pad_token in (0, 4):
        policy = _policy()
        batch = _batch([5, 1, pad_token], [True, True, False])
        logp, _ = policy(batch)
        loss, _ = grpo_loss(logp, logp.detach(), torch.ones(2, 3), batch.mask, eps_low=0.2, loss_type="bnpo")
        loss.backward()
        assert math.isclose(loss.item(), -1.0, rel_tol=1e-6)
        grads.append(policy.net[-1].bias.grad.clone())
    # real steps (1, 2) and (0, 1): dimension 0 onehots sum to [1, 1], dimension 1 to [0, 1, 1]
    expected = -0.5 * torch.tensor([1 - 2 * 0.25, 1 - 2 * 0.75, 0 - 2 * 0.25, 1 - 2 * 0.25, 1 - 2 * 0.5])
    torch.testing.assert_close(grads[0], expected)
    torch.testing.assert_close(grads[1], expected)


def test_the_same_numbers_as_stable_baselines3s_multicategorical():
    sb3 = pytest.importorskip("stable_baselines3.common.distributions")
    torch.manual_seed(0)
    policy = CategoricalMLPPolicy(3, 24, hidden_sizes=(8,), action_nvec=[2, 3, 4])
    torch.nn.init.normal_(policy.net[-1].weight)
    obs = torch.randn(5, 3)
    tokens = torch.tensor([0, 7, 13, 22, 23])
    theirs = sb3.MultiCategoricalDistribution([2, 3, 4]).proba_distribution(policy.logits(obs))
    actions = torch.stack(action_digits(tokens, [2, 3, 4]), 1)
    batch = RolloutBatch(context=obs[:, None], tokens=tokens[:, None], mask=torch.ones(5, 1, dtype=torch.bool),
                         group=torch.zeros(5, dtype=torch.long), num_generations=5, rewards=torch.zeros(5))
    logp, entropy = policy(batch)
    torch.testing.assert_close(logp[:, 0], theirs.log_prob(actions))
    torch.testing.assert_close(entropy[:, 0], theirs.entropy())


def test_each_dimension_is_drawn_from_its_own_categorical():
    policy, n = _policy(), 40_000
    obs = np.zeros((n, 2), dtype=np.float32)
    numpy_draws = policy.numpy_actor(np.random.default_rng(0))(obs)
    torch_draws = policy.act(torch.from_numpy(obs), generator=torch.Generator().manual_seed(0)).numpy()
    for draws in (numpy_draws, torch_draws):
        assert draws.min() >= 0 and draws.max() <= 5
        d0, d1 = action_digits(draws, [2, 3])
        np.testing.assert_allclose(np.bincount(d0, minlength=2) / n, P0, atol=0.01)
        np.testing.assert_allclose(np.bincount(d1, minlength=3) / n, P1, atol=0.01)
    greedy = policy.numpy_actor(greedy=True)(obs[:2])
    assert greedy.tolist() == [5, 5] == policy.act(torch.from_numpy(obs[:2]), greedy=True).tolist()  # (1, 2)


def test_the_factorised_head_is_saved_and_loaded(tmp_path):
    policy = _policy()
    save_policy(policy, tmp_path / "p")
    loaded = load_policy(tmp_path / "p")
    assert loaded.action_nvec == [2, 3]
    batch = _batch([5, 1], [True, True])
    torch.testing.assert_close(loaded(batch)[0], policy(batch)[0])


@pytest.mark.parametrize("nvec", [[2, 4], [0, 6], []])
def test_sizes_whose_product_is_not_the_action_count_are_refused(nvec):
    with pytest.raises(ValueError, match="action_nvec"):
        CategoricalMLPPolicy(2, 6, action_nvec=nvec)
