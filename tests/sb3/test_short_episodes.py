"""An env without an id whose episodes are a step or two takes enough groups per update for
SHORT_ROLLOUT_STEPS env steps, measured by random play on a copy; longer episodes keep one group."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from grpo_seq import GRPO
from grpo_seq.errors import UsageError
from grpo_seq.sb3.short_episodes import SHORT_ROLLOUT_STEPS, groups_for_short_episodes, random_episode_length


class Episodes(gym.Env):
    """Episodes of ``length`` steps (0: never ending); counts the steps it was given."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, length: int = 1):
        self.length, self.steps = length, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t, self.steps = self.t + 1, self.steps + 1
        return np.zeros(2, np.float32), 0.0, self.length > 0 and self.t >= self.length, False, {}


def test_groups_reach_the_rollout_floor():
    assert SHORT_ROLLOUT_STEPS == 32
    assert groups_for_short_episodes(1, 2) == 16      # 32 / (2 x 1)
    assert groups_for_short_episodes(3, 2) == 6       # 32 / 6 = 5.3, rounded up
    assert groups_for_short_episodes(22.5, 2) == 1    # CartPole's random play: one group holds 45 steps


def test_random_play_measures_episodes_on_a_copy_only():
    assert random_episode_length(lambda: Episodes(3), seed=0) == 3.0
    assert random_episode_length(lambda: Episodes(0), seed=0) is None  # none ended within the probe

    def refuse():
        raise UsageError("cannot be copied")

    assert random_episode_length(refuse, seed=0) is None


def test_the_door_gives_a_one_step_env_enough_groups_and_keeps_them_on_load(tmp_path):
    env = Episodes(1)
    model = GRPO("MlpPolicy", env, seed=0)
    assert model.config.num_groups == 16 and model.config.num_generations == 2
    assert env.steps == 0  # random play stepped a copy
    model.save(tmp_path / "m")
    assert GRPO.load(tmp_path / "m", env=Episodes(1)).config.num_groups == 16


@pytest.mark.parametrize("kwargs, groups", [({"num_groups": 3}, 3), ({}, 1)])
def test_given_groups_and_long_episodes_keep_theirs(kwargs, groups):
    assert GRPO("MlpPolicy", Episodes(1 if kwargs else 40), seed=0, **kwargs).config.num_groups == groups


@pytest.mark.parametrize("length, n_steps, groups", [(1, 64, 32), (1, 2048, 1024), (40, 2048, 26), (100, 256, 1)])
def test_n_steps_sizes_groups_by_the_episodes_of_an_env_without_a_time_limit(length, n_steps, groups):
    # PPO's rollout of n_steps: groups of two episodes of the length random play measures, not of
    # the 1000-step cap (SB3's IdentityEnv, 100 steps with n_steps 256, keeps its one group)
    config = GRPO("MlpPolicy", Episodes(length), seed=0, n_steps=n_steps).config
    assert (config.num_groups, config.num_generations) == (groups, 2)
