"""A group's members start from one state only where the env's seeded resets decide it: checked, and said."""

import warnings

import gymnasium as gym
import numpy as np
import pytest

from grpo_seq import EnvGroupSampler
from grpo_seq.sampling.start_states import same_start


class IgnoresSeed(gym.Env):
    """Starts wherever its own counter says, whatever the seed."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,))
    action_space = gym.spaces.Discrete(2)
    made = 0

    def __init__(self):
        IgnoresSeed.made += 1
        self.start = float(IgnoresSeed.made)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([self.start, 0.0], np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, True, False, {}


def test_an_env_that_ignores_the_seed_is_named_and_one_that_honours_it_is_not():
    with pytest.warns(UserWarning, match=r"IgnoresSeed-test: two resets with the same seed gave different observations"):
        EnvGroupSampler("IgnoresSeed-test", 1, 2, max_episode_steps=5, env_fn=IgnoresSeed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EnvGroupSampler("Acrobot-v1", 1, 2, env_fn=lambda: gym.make("Acrobot-v1"))  # seeded: one start


def test_same_start_compares_every_part_of_an_observation():
    a = {"pos": np.array([1.0, 2.0]), "flags": (np.array([1]), np.array([0]))}
    assert same_start(a, {"pos": np.array([1.0, 2.0]), "flags": (np.array([1]), np.array([0]))})
    assert not same_start(a, {"pos": np.array([1.0, 2.0]), "flags": (np.array([1]), np.array([1]))})
    assert not same_start(a, {"pos": np.array([1.0, 2.0])})
