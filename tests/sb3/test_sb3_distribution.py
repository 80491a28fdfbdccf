"""``model.policy.get_distribution``: SB3's Distribution methods over the env's own actions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from grpo_seq import GRPO
from grpo_seq.errors import UsageError


class Spaces(gym.Env):
    """A fixed observation and the action space the test names."""

    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)

    def __init__(self, action_space):
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, True, False, {}


def distribution(action_space):
    model = GRPO("MlpPolicy", Spaces(action_space), seed=0)
    obs, _ = model.policy.obs_to_tensor(np.array([[0.1, -0.2, 0.3], [0.5, 0.0, -0.4]], np.float32))
    return model, obs, model.policy.get_distribution(obs)


def test_a_discrete_action_is_one_categorical_of_the_policys_logits():
    model, obs, dist = distribution(gym.spaces.Discrete(3, start=1))  # the env's actions are 1, 2, 3
    logp = torch.log_softmax(model.policy.logits(obs), -1)
    torch.testing.assert_close(dist.log_prob(np.array([3, 1])), torch.stack([logp[0, 2], logp[1, 0]]))
    torch.testing.assert_close(dist.entropy(), -(logp.exp() * logp).sum(-1))
    assert dist.mode().tolist() == model.predict(np.array([[0.1, -0.2, 0.3], [0.5, 0.0, -0.4]]), deterministic=True)[0].tolist()
    assert set(dist.sample().tolist()) <= {1, 2, 3}


def test_a_multidiscrete_action_sums_its_dimensions():
    model, obs, dist = distribution(gym.spaces.MultiDiscrete([2, 3]))
    logits = model.policy.logits(obs)
    first, second = torch.log_softmax(logits[:, :2], -1), torch.log_softmax(logits[:, 2:], -1)
    actions = np.array([[1, 2], [0, 0]])
    want = torch.stack([first[0, 1] + second[0, 2], first[1, 0] + second[1, 0]])
    torch.testing.assert_close(dist.log_prob(actions), want)
    torch.testing.assert_close(dist.log_prob(torch.as_tensor(actions)), want)  # a tensor, as SB3 passes them
    assert isinstance(dist.distribution, list) and len(dist.distribution) == 2
    assert dist.sample().shape == (2, 2)


def test_a_box_action_counts_as_the_nearest_of_its_values():
    model, obs, dist = distribution(gym.spaces.Box(-2.0, 2.0, (2,), np.float32))
    values = model.policy.codec.action_values[0]  # the same values in both dimensions
    on = np.array([[values[0], values[-1]], [values[3], values[3]]], np.float32)
    near = on + np.float32(0.3 * (values[1] - values[0]))  # nearer the same values than any other
    torch.testing.assert_close(dist.log_prob(near), dist.log_prob(on))
    mode = dist.mode()
    assert mode.shape == (2, 2) and (np.abs(mode.numpy()[..., None] - values).min(-1) < 1e-6).all()
    assert torch.all(dist.log_prob(mode) >= dist.log_prob(on))  # the likeliest value of each dimension


def test_values_are_refused_by_name():
    model, obs, _ = distribution(gym.spaces.Discrete(2))
    with pytest.raises(UsageError, match="no value head"):
        model.policy.evaluate_actions(obs, torch.zeros(2))
    with pytest.raises(UsageError, match="no value head"):
        model.policy.predict_values(obs)
