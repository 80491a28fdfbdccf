"""Advantages against hand-computed numbers; the working is in the comments."""

import math

import pytest
import torch

from grpo_seq.math.advantages import (
    anchor_states, anchor_step_advantages, discounted_returns, outcome_advantages, process_advantages,
    stepwise_return_advantages,
)


def test_outcome_advantages_hand_computed():
    # group 0: r = [10, 20, 30]; mean 20; deviations -10, 0, 10;
    #   Bessel std = sqrt((100 + 0 + 100) / (3 - 1)) = 10  ->  A = [-1, 0, 1]
    # group 1: r = [0, 0, 3]; mean 1; deviations -1, -1, 2;
    #   std = sqrt((1 + 1 + 4) / 2) = sqrt(3)  ->  A = [-1, -1, 2] / sqrt(3)
    r = torch.tensor([[10.0, 20.0, 30.0], [0.0, 0.0, 3.0]])
    s3 = math.sqrt(3)
    expected = torch.tensor([[-1.0, 0.0, 1.0], [-1 / s3, -1 / s3, 2 / s3]])
    torch.testing.assert_close(outcome_advantages(r), expected)


def test_outcome_advantages_without_std_scaling_only_centre():
    r = torch.tensor([[10.0, 20.0, 30.0]])
    torch.testing.assert_close(outcome_advantages(r, scale_by_std=False), torch.tensor([[-10.0, 0.0, 10.0]]))


def test_zero_variance_group_gives_exact_zero_not_nan():
    # 0.1 * 3 / 3 != 0.1 in floating point: the mean differs from the members by an ulp,
    # so "(r - mean) / std" would be garbage or NaN; the group must read exactly 0.
    r = torch.tensor([[0.1, 0.1, 0.1], [5.0, 5.0, 5.0], [1.0, 2.0, 3.0]])
    a = outcome_advantages(r)
    assert torch.isfinite(a).all()
    assert (a[:2] == 0).all()
    assert (a[2] != 0).any()


def test_outcome_rejects_single_member_groups():
    with pytest.raises(ValueError, match="at least 2"):
        outcome_advantages(torch.ones(4, 1))


def test_process_advantages_hand_computed():
    # G = 2, T = 3. member 0 step rewards [1, 0, 2]; member 1 [0, 1, <pad>].
    # Valid step rewards of the group: 1, 0, 2, 0, 1 -> n = 5, mean = 4/5 = 0.8
    # deviations .2, -.8, 1.2, -.8, .2; squares sum to 2.8; Bessel var = 2.8 / 4 = 0.7
    # normalised: m0 = [.2, -.8, 1.2] / sqrt(.7); m1 = [-.8, .2] / sqrt(.7)
    # advantage = sum of normalised rewards at or after t:
    #   m0: [(.2 - .8 + 1.2), (-.8 + 1.2), 1.2] / sqrt(.7) = [.6, .4, 1.2] / sqrt(.7)
    #   m1: [(-.8 + .2), .2, 0 (padding)] / sqrt(.7) = [-.6, .2, 0] / sqrt(.7)
    r = torch.tensor([[[1.0, 0.0, 2.0], [0.0, 1.0, 99.0]]])
    m = torch.tensor([[[1, 1, 1], [1, 1, 0]]], dtype=torch.bool)
    s = math.sqrt(0.7)
    expected = torch.tensor([[[0.6 / s, 0.4 / s, 1.2 / s], [-0.6 / s, 0.2 / s, 0.0]]])
    torch.testing.assert_close(process_advantages(r, m), expected)


def test_process_advantages_are_zero_when_every_step_pays_the_same():
    # The trap of DESIGN.md: CartPole pays 1 per step, so every normalised reward is 0.
    r = torch.ones(1, 3, 4)
    m = torch.tensor([[[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]]], dtype=torch.bool)
    a = process_advantages(r, m)
    assert (a == 0).all()


def test_stepwise_return_advantages_hand_computed():
    # Three CartPole-like episodes of lengths 3, 2, 1 paying 1 per step.
    # returns-to-go: m0 [3, 2, 1]; m1 [2, 1, -]; m2 [1, -, -]
    # t = 0: running m0, m1, m2 -> values 3, 2, 1; mean 2; std sqrt((1+0+1)/2) = 1 -> [1, 0, -1]
    # t = 1: running m0, m1 -> values 2, 1; mean 1.5; std sqrt((.25+.25)/1) = sqrt(.5)
    #        -> [.5, -.5] / sqrt(.5) = [sqrt(.5), -sqrt(.5)]
    # t = 2: only m0 runs: nobody to compare with -> 0
    r = torch.ones(1, 3, 3)
    m = torch.tensor([[[1, 1, 1], [1, 1, 0], [1, 0, 0]]], dtype=torch.bool)
    h = math.sqrt(0.5)
    expected = torch.tensor([[[1.0, h, 0.0], [0.0, -h, 0.0], [-1.0, 0.0, 0.0]]])
    torch.testing.assert_close(stepwise_return_advantages(r, m), expected)


def test_stepwise_batch_level_divides_by_one_std_of_every_compared_step():
    # The episodes above: centred returns-to-go at t = 0 are [1, 0, -1] (mean 2), at t = 1
    # [.5, -.5] (mean 1.5); t = 2 has m0 alone, flat -> 0. Compared steps N = 3 + 2 + 1 = 6,
    # sum of squares 1 + 0 + 1 + .25 + .25 + 0 = 2.5 -> sigma = sqrt(2.5 / 5) = sqrt(.5).
    # Each step's differences keep their size: t = 1's half-steps stay half of t = 0's.
    r = torch.ones(1, 3, 3)
    m = torch.tensor([[[1, 1, 1], [1, 1, 0], [1, 0, 0]]], dtype=torch.bool)
    s = math.sqrt(0.5)
    expected = torch.tensor([[[1 / s, 0.5 / s, 0.0], [0.0, -0.5 / s, 0.0], [-1 / s, 0.0, 0.0]]])
    torch.testing.assert_close(stepwise_return_advantages(r, m, level="batch"), expected)
    # a second group joins the batch's std and nothing else: a group of equal members stays 0
    r2, m2 = torch.cat([r, torch.ones(1, 3, 3)]), torch.cat([m, torch.ones(1, 3, 3, dtype=torch.bool)])
    # N = 6 + 9 = 15, the same sum of squares 2.5 -> sigma = sqrt(2.5 / 14)
    a = stepwise_return_advantages(r2, m2, level="batch")
    torch.testing.assert_close(a[0], expected[0] * s / math.sqrt(2.5 / 14))
    assert (a[1] == 0).all()


def test_stepwise_absorb_ended_compares_the_survivors_with_the_ended_at_zero():
    # The same three episodes as above, an ended member counting with return-to-go 0.
    # t = 0: unchanged, [1, 0, -1]
    # t = 1: values 2, 1, 0 (m2 ended) -> [1, 0, -1]; m2's advantage is masked out -> [1, 0, 0]
    # t = 2: values 1, 0, 0; mean 1/3; centred [2/3, -1/3, -1/3]; std sqrt((4/9 + 1/9 + 1/9)/2) = sqrt(1/3)
    #        -> m0 gets (2/3) / sqrt(1/3) = 2 / sqrt(3), where without absorb_ended it got 0
    r = torch.ones(1, 3, 3)
    m = torch.tensor([[[1, 1, 1], [1, 1, 0], [1, 0, 0]]], dtype=torch.bool)
    expected = torch.tensor([[[1.0, 1.0, 2 / math.sqrt(3)], [0.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]])
    torch.testing.assert_close(stepwise_return_advantages(r, m, absorb_ended=True), expected)
    # centred only, a member lingering at a cost: m0 pays -1 at t = 1, 2 after m1 ended at t = 0
    # t = 1: values -2, 0 -> mean -1 -> m0 gets -1; t = 2: values -1, 0 -> m0 gets -0.5
    r = torch.tensor([[[1.0, -1.0, -1.0], [1.0, 0.0, 0.0]]])
    m = torch.tensor([[[1, 1, 1], [1, 0, 0]]], dtype=torch.bool)
    a = stepwise_return_advantages(r, m, scale_by_std=False, absorb_ended=True)
    torch.testing.assert_close(a, torch.tensor([[[-1.0, -1.0, -0.5], [1.0, 0.0, 0.0]]]))
    # a group whose members all ended leaves its padding at 0
    pad = stepwise_return_advantages(torch.ones(1, 2, 4), torch.tensor([[[1, 1, 0, 0], [1, 0, 0, 0]]]), absorb_ended=True)
    assert (pad[..., 2:] == 0).all()


def test_stepwise_discounted_returns():
    # gamma = 0.5, two members, rewards m0 [1, 1], m1 [1, <pad>]
    # returns-to-go: m0 [1 + .5 * 1, 1] = [1.5, 1]; m1 [1, -]
    # t = 0: values 1.5, 1 -> centred [.25, -.25]; std sqrt(.0625 * 2 / 1) = sqrt(.125)
    r = torch.ones(1, 2, 2)
    m = torch.tensor([[[1, 1], [1, 0]]], dtype=torch.bool)
    a = stepwise_return_advantages(r, m, gamma=0.5)
    s = math.sqrt(0.125)
    torch.testing.assert_close(a, torch.tensor([[[0.25 / s, 0.0], [-0.25 / s, 0.0]]]))


def test_discounted_returns_hand_computed():
    # gamma = 0.5, rewards [1, 2, 4]: R_2 = 4; R_1 = 2 + .5 * 4 = 4; R_0 = 1 + .5 * 4 = 3
    r = torch.tensor([[1.0, 2.0, 4.0]])
    torch.testing.assert_close(discounted_returns(r, 0.5), torch.tensor([[3.0, 4.0, 4.0]]))


def test_discounted_returns_long_horizon_takes_the_loop():
    # 0.5^2000 underflows float64, so the closed form would divide by 0; the loop takes over.
    # Ones for T steps: R_t = (1 - .5^(T - t)) / (1 - .5), so R_{T-1} = 1, R_{T-2} = 1.5, R_0 = 2 (to float32).
    r = torch.ones(1, 2000)
    R = discounted_returns(r, 0.5)
    assert torch.isfinite(R).all()
    torch.testing.assert_close(R[0, [-1, -2, 0]], torch.tensor([1.0, 1.5, 2.0]))


def test_stepwise_equal_members_give_zero():
    r = torch.ones(2, 4, 5)
    m = torch.ones(2, 4, 5, dtype=torch.bool)
    assert (stepwise_return_advantages(r, m) == 0).all()


def test_process_equal_step_rewards_give_exactly_zero():
    # One group of 2: member 0 runs 10 steps, member 1 stops after 5, every step pays 0.1. All
    # step rewards of the group are equal, so there is no preference: exactly 0 everywhere. (A
    # float std of these values is ~1e-8, not 0; dividing by it gave advantages up to 9.66.)
    r = torch.full((1, 2, 10), 0.1)
    m = torch.ones(1, 2, 10)
    m[0, 1, 5:] = 0
    assert torch.equal(process_advantages(r, m), torch.zeros(1, 2, 10))


def test_all_equal_is_exact_and_masked():
    from grpo_seq.math.advantages import all_equal

    v = torch.tensor([[0.1, 0.1, 5.0], [0.3, 0.3 + 1e-7, 0.3]])
    m = torch.tensor([[1, 1, 0], [1, 1, 1]])
    # row 0: the 5.0 is masked out, the rest equal; row 1: one value differs by 1e-7
    assert all_equal(v, m, 1).squeeze(1).tolist() == [True, False]
    assert all_equal(v, None, 1).squeeze(1).tolist() == [False, False]
    # fewer than two values under the mask: nothing to compare, counted as equal
    assert all_equal(v, torch.tensor([[1, 0, 0], [0, 0, 0]]), 1).squeeze(1).tolist() == [True, True]


def test_equal_reward_groups_is_the_rule_the_advantages_use():
    from grpo_seq.math.advantages import equal_reward_groups

    rewards = torch.tensor([[0.1] * 10, [0.3] * 9 + [0.3 + 1e-7], [1.0, 0.0] * 5])
    assert equal_reward_groups(rewards).tolist() == [True, False, False]
    assert (outcome_advantages(rewards[:1]) == 0).all()  # std of ten 0.1s is about 1e-8, not 0: still flat


def test_members_apart_by_less_than_float32_can_square_still_get_the_usual_advantages():
    # Returns 2e-38 apart: centred +-1e-38, whose squares (1e-76) are 0 in float32, so the plain
    # std is 0 and the advantages were +-inf. Scaled by max |c| first: std = 1e-38 * sqrt(2),
    # A = +-1e-38 / (1e-38 * sqrt(2)) = +-0.7071, what any other pair of different returns gets.
    expected = torch.tensor([[1.0, -1.0]]) / math.sqrt(2)
    assert torch.allclose(outcome_advantages(torch.tensor([[2e-38, 0.0]])), expected)
    step = stepwise_return_advantages(torch.tensor([[[0.0, 2e-38], [0.0, 0.0]]]), torch.ones(1, 2, 2))
    assert torch.allclose(step, torch.tensor([[[1.0, 1.0], [-1.0, -1.0]]]) / math.sqrt(2))
    batch = stepwise_return_advantages(torch.tensor([[[2e-38], [0.0]]]), torch.ones(1, 2, 1), level="batch")
    assert torch.isfinite(batch).all() and batch[0, 0, 0] > 0 > batch[0, 1, 0]


def test_anchor_states_are_equal_observations_within_a_group():
    # group 0: member 0 sees [0, 1, 0], member 1 sees [1, 0, 2] (one number per observation):
    #   observation 0 at (0,0), (0,2), (1,1); observation 1 at (0,1), (1,0); 2 alone at (1,2)
    # group 1 sees observation 0 too, but another group's steps are never compared: ids of its own
    obs = torch.tensor([[[0.0, 1.0, 0.0], [1.0, 0.0, 2.0]], [[0.0, 0.0, 5.0], [0.0, 5.0, 5.0]]]).unsqueeze(-1)
    mask = torch.ones(2, 2, 3)
    mask[1, 1, 2] = 0  # past the end of member 1's episode
    ids = anchor_states(obs, mask)
    g0 = ids[0]
    assert g0[0, 0] == g0[0, 2] == g0[1, 1] and g0[0, 1] == g0[1, 0]
    assert len({int(g0[0, 0]), int(g0[0, 1]), int(g0[1, 2])}) == 3
    assert not set(ids[1][mask[1].bool()].tolist()) & set(g0.flatten().tolist())
    assert ids[1, 1, 2] == -1


def test_anchor_step_advantages_hand_computed():
    # anchors as above (group 0); returns-to-go R = [[1, 2, 3], [4, 5, 6]]
    #   observation 0: R = 1, 3, 5; mean 3 -> -2, 0, +2; Bessel std sqrt((4 + 0 + 4) / 2) = 2 -> -1, 0, 1
    #   observation 1: R = 2, 4; mean 3 -> -1, +1; std sqrt(2) -> -1/sqrt(2), +1/sqrt(2)
    #   observation 2: a step group of one -> 0
    obs = torch.tensor([[[0.0, 1.0, 0.0], [1.0, 0.0, 2.0]]]).unsqueeze(-1)
    mask = torch.ones(1, 2, 3)
    ret = torch.tensor([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]])
    ids = anchor_states(obs, mask)
    centred = anchor_step_advantages(ret, mask, ids)
    torch.testing.assert_close(centred, torch.tensor([[[-2.0, -1.0, 0.0], [1.0, 2.0, 0.0]]]))
    h = 1 / math.sqrt(2)
    scaled = anchor_step_advantages(ret, mask, ids, scale_by_std=True)
    torch.testing.assert_close(scaled, torch.tensor([[[-1.0, -h, 0.0], [h, 1.0, 0.0]]]))


def test_anchor_step_advantages_are_zero_where_states_never_repeat_or_returns_tie():
    obs = torch.randn(2, 3, 5, 4)  # continuous observations: every step its own anchor
    mask = torch.ones(2, 3, 5)
    ret = torch.randn(2, 3, 5)
    assert anchor_step_advantages(ret, mask, anchor_states(obs, mask)).abs().max() == 0
    same = torch.zeros(1, 2, 3, 1)  # one state everywhere, equal returns: no preference, exactly 0
    tied = anchor_step_advantages(torch.full((1, 2, 3), 0.1), torch.ones(1, 2, 3), anchor_states(same, torch.ones(1, 2, 3)),
                                  scale_by_std=True)
    assert tied.abs().max() == 0


def test_compute_advantages_adds_w_times_the_anchor_part_to_the_groups():
    from grpo_seq.math.advantages import compute_advantages, group_advantages
    from grpo_seq.math.batch import RolloutBatch
    from grpo_seq.loop.config import LoopConfig

    # one group of 2 episodes of 3 steps, observations as in the hand-computed case, reward 1 on
    # a member's last step only; gamma 1: returns-to-go [[1, 1, 1], [1, 1, 1]] but member 1's
    # episode is two steps long, so its returns are [1, 1] and its third step is padding
    obs = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 2.0]]).unsqueeze(-1)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]]).bool()
    step_r = torch.tensor([[0.0, 0.0, 2.0], [0.0, 1.0, 0.0]])
    batch = RolloutBatch(context=obs, tokens=torch.zeros(2, 3, dtype=torch.long), mask=mask, group=torch.zeros(2, dtype=torch.long),
                         num_generations=2, rewards=step_r.sum(1), step_rewards=step_r)
    cfg = LoopConfig(advantage="stepwise", scale_rewards=False, gamma=1.0, beta=0.0, step_advantage_w=0.5)
    # returns-to-go: member 0 [2, 2, 2], member 1 [1, 1, -]
    # observation 0 at (0,0) R 2, (0,2) R 2, (1,1) R 1: mean 5/3 -> +1/3, +1/3, -2/3
    # observation 1 at (0,1) R 2, (1,0) R 1: mean 1.5 -> +0.5, -0.5
    anchor = torch.tensor([[1 / 3, 0.5, 1 / 3], [-0.5, -2 / 3, 0.0]])
    expected = group_advantages(batch, cfg) + 0.5 * anchor
    torch.testing.assert_close(compute_advantages(batch, cfg), expected)
    off = LoopConfig(advantage="stepwise", scale_rewards=False, gamma=1.0, beta=0.0)
    torch.testing.assert_close(compute_advantages(batch, off), group_advantages(batch, off))


def test_step_advantage_w_refuses_a_batch_without_an_observation_per_step():
    from grpo_seq.math.advantages import compute_advantages
    from grpo_seq.math.batch import RolloutBatch
    from grpo_seq.loop.config import LoopConfig
    from grpo_seq.errors import ConfigError

    text = RolloutBatch(context=torch.ones(2, 4, dtype=torch.long), tokens=torch.ones(2, 3, dtype=torch.long),
                        mask=torch.ones(2, 3).bool(), group=torch.zeros(2, dtype=torch.long), num_generations=2,
                        rewards=torch.tensor([0.0, 1.0]), step_rewards=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="step_advantage_w"):
        compute_advantages(text, LoopConfig(advantage="stepwise", beta=0.0, step_advantage_w=1.0))
    with pytest.raises(ConfigError, match="step_advantage_w"):
        LoopConfig(step_advantage_w=-1.0)


def test_shared_advantages_give_each_sequence_its_outputs_mean_over_the_outputs_tokens():
    import torch

    from grpo_seq.math.advantages import shared_advantages

    adv = torch.tensor([[1.0, 3.0, 9.0], [2.0, 2.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    extra_mask = torch.tensor([[True, False], [True, True], [False, False]])
    out = shared_advantages(adv, mask, torch.tensor([0, 1, 0]), extra_mask)
    # output 0: (1 + 3) / 2 = 2 (the 9 is outside its mask); output 1: 2
    assert out.tolist() == [[2.0, 0.0], [2.0, 2.0], [0.0, 0.0]]
