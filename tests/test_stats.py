"""grpo_seq/math/stats.py against hand-computed numbers (z = 1.959964, the 95% quantile)."""

from __future__ import annotations

import math

import pytest

from grpo_seq.math.stats import (
    best_constant, mcnemar_exact_p, mean_interval, newcombe_paired_interval, paired_difference, wilson_interval,
)

Z = 1.959963984540054


def test_wilson_interval_of_16_right_of_64():
    # p = 0.25, z^2 = 3.841459, d = 1 + z^2/64 = 1.060023
    # centre = (0.25 + z^2/128) / d = 0.280011 / 1.060023 = 0.264156
    # half = z/d * sqrt(0.25*0.75/64 + z^2/(4*64^2)) = 1.848983 * sqrt(0.0029297 + 0.00023446) = 0.104007
    low, high = wilson_interval(16, 64)
    assert low == pytest.approx(0.264156 - 0.104007, abs=2e-6) and high == pytest.approx(0.264156 + 0.104007, abs=2e-6)


def test_wilson_interval_is_not_empty_at_none_and_all_right():
    # k = 0: centre = half = (z^2/2n)/(1 + z^2/n) -> [0, z^2 / (n + z^2)]; n = 10: 3.841459 / 13.841459 = 0.277532
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.277532), abs=1e-6)
    assert wilson_interval(10, 10) == pytest.approx((1 - 0.277532, 1.0), abs=1e-6)
    with pytest.raises(ValueError, match="0 <= k <= n"):
        wilson_interval(3, 2)


def test_mcnemar_exact_p():
    # 8 items only the trained model got right, 2 only the base: 2 * (C(10,0)+C(10,1)+C(10,2)) / 2^10 = 2 * 56/1024
    assert mcnemar_exact_p(8, 2) == pytest.approx(0.109375)
    assert mcnemar_exact_p(2, 8) == mcnemar_exact_p(8, 2)
    assert mcnemar_exact_p(9, 0) == pytest.approx(2 / 512)  # 2 * 1/2^9
    assert mcnemar_exact_p(0, 0) == 1.0 and mcnemar_exact_p(3, 3) == 1.0  # capped at 1


def test_newcombe_paired_interval_worked_by_hand():
    # both 12, only before 2, only after 9, neither 4 (n = 27): p1 (after) = 21/27 = 0.777778,
    # p2 (before) = 14/27 = 0.518519, D = 7/27 = 0.259259.
    # Wilson: 21/27 -> [0.592431, 0.893928]; 14/27 -> [0.339856, 0.692568].
    # B = 12*4 - 9*2 = 30 > n/2 = 13.5 -> C = 16.5; phi = 16.5 / sqrt(21*6*14*13) = 16.5 / 151.4332 = 0.108959
    # lower = D - sqrt(0.185347^2 - 2 phi 0.185347 * 0.174049 + 0.174049^2) = D - 0.240035 = 0.019224
    # upper = D + sqrt(0.116150^2 - 2 phi 0.116150 * 0.178662 + 0.178662^2) = D + 0.202210 = 0.461469
    l1, u1 = wilson_interval(21, 27)
    l2, u2 = wilson_interval(14, 27)
    assert (l1, u1, l2, u2) == pytest.approx((0.592431, 0.893928, 0.339856, 0.692568), abs=1e-6)
    assert newcombe_paired_interval(12, 2, 9, 4) == pytest.approx((0.019224, 0.461469), abs=1e-6)
    # the models swapped: the interval mirrors
    low, high = newcombe_paired_interval(12, 9, 2, 4)
    assert (low, high) == pytest.approx((-0.461469, -0.019224), abs=1e-6)


def test_paired_difference_of_right_and_wrong():
    before = [1, 1, 0, 0, 0, 1, 0, 0, 0, 0]
    after = [1, 0, 1, 1, 1, 1, 1, 0, 0, 1]  # better on 5 items, worse on 1
    d = paired_difference(before, after)
    assert d["value"] == pytest.approx(0.4) and (d["better"], d["worse"]) == (5, 1)
    assert d["p_value"] == pytest.approx(2 * 7 / 64)  # 2 * (C(6,0) + C(6,1)) / 2^6
    assert d["interval"] == pytest.approx(list(newcombe_paired_interval(2, 1, 5, 2)))
    assert d["interval"][0] < 0 < d["interval"][1]  # 10 items: a gain of 40 points is not yet beyond noise


def test_paired_difference_of_other_scores_is_a_normal_interval():
    # differences 0.5, 0.5, -0.5, 1.5: mean 0.5, sample sd sqrt((0 + 0 + 1 + 1) / 3) = 0.816497
    d = paired_difference([0.0, 0.5, 1.0, 0.0], [0.5, 1.0, 0.5, 1.5])
    half = Z * 0.816497 / 2
    assert d["value"] == pytest.approx(0.5) and d["interval"] == pytest.approx([0.5 - half, 0.5 + half], abs=1e-6)
    assert "p_value" not in d and d["method"].startswith("normal")
    with pytest.raises(ValueError, match="same items"):
        paired_difference([1.0], [1.0, 0.0])


def test_mean_interval_picks_wilson_for_right_and_wrong():
    assert mean_interval([1, 0, 0, 0]) == wilson_interval(1, 4)
    low, high = mean_interval([0.2, 0.4])  # sd = 0.141421, half = z * 0.141421 / sqrt(2) = 0.195996
    assert (low, high) == pytest.approx((0.3 - 0.195996, 0.3 + 0.195996), abs=1e-6)
    assert math.isclose(mean_interval([0.5])[0], 0.5)


def test_best_constant_takes_the_best_and_the_first_on_ties():
    gold = ["1", "2", "1", "1", "3"]
    score = lambda text: [float(text == g) for g in gold]  # noqa: E731
    assert best_constant(["2", "1", "3"], score) == ("1", [1.0, 0.0, 1.0, 1.0, 0.0])
    assert best_constant(["3", "2"], score)[0] == "3"
    assert best_constant([], score) is None
