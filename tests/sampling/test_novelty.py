"""NoveltyBonus: scale / sqrt(visits of the next observation's cell), counted over the run."""

import json
import math

import numpy as np
import pytest

from grpo_seq.sampling.novelty import NoveltyBonus


def test_bonus_by_hand():
    # cells 2 / bins * obs_scale = 0.5 wide in dim 0, 1.0 wide in dim 1
    bonus = NoveltyBonus(0.1, obs_scale=[1.0, 2.0], bins=4)
    obs = np.array([[[0.1, 0.1], [0.2, 0.9]],      # step 0: both in cell (0, 0)
                    [[0.6, 0.1], [9.0, 9.0]]])     # step 1: cell (1, 0); the second member has ended
    mask = np.array([[True, True], [True, False]])
    got = bonus(obs, mask)
    # cell (0, 0) visited twice in this rollout: 0.1 / sqrt(2) each; cell (1, 0) once: 0.1; masked: 0
    np.testing.assert_allclose(got, [[0.1 / math.sqrt(2)] * 2, [0.1, 0.0]], rtol=1e-6)
    again = bonus(obs[:1, :1], mask[:1, :1])  # a third visit to (0, 0)
    np.testing.assert_allclose(again, [[0.1 / math.sqrt(3)]], rtol=1e-6)


def test_counts_round_trip_through_json_state():
    bonus = NoveltyBonus(1.0, obs_scale=[1.0], bins=2)
    bonus(np.array([[[-0.5]], [[0.5]], [[0.7]]]), np.ones((3, 1), bool))
    other = NoveltyBonus(1.0, obs_scale=[1.0], bins=2)
    other.load_state_dict(bonus.state_dict())
    assert other.counts == bonus.counts == {np.array([-1]).tobytes(): 1, np.array([0]).tobytes(): 2}


def test_bad_settings_refused():
    with pytest.raises(ValueError, match="scale > 0"):
        NoveltyBonus(0.0, obs_scale=[1.0])


def test_images_count_each_distinct_observation():
    # no per-dimension units (a policy over pixels): identical images share a count, any other differs
    bonus = NoveltyBonus(1.0, obs_scale=None)
    a, b = np.zeros(12, np.float32), np.zeros(12, np.float32)
    b[5] = 1.0
    got = bonus(np.stack([[a, a], [b, a]]), np.ones((2, 2), bool))
    np.testing.assert_allclose(got, [[1 / math.sqrt(3)] * 2, [1.0, 1 / math.sqrt(3)]], rtol=1e-6)
    other = NoveltyBonus(1.0, obs_scale=None)
    other.load_state_dict(json.loads(json.dumps(bonus.state_dict())))
    assert other.counts == bonus.counts and sorted(other.counts.values()) == [1, 3]
