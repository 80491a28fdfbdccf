"""SB3's ``batch_size`` through the door: minibatches of that many env steps drawn from the whole
rollout, as PPO's; a loss over whole episodes keeps minibatches of whole episodes."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from grpo_seq import GRPO


class _Copy(gym.Env):
    """Observation: a MultiDiscrete([4, 4]) target drawn afresh each step; reward 1 for naming all of
    it (Stable-Baselines3's IdentityEnvMultiDiscrete, 100 steps an episode)."""

    observation_space = action_space = gym.spaces.MultiDiscrete([4, 4])

    def reset(self, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t, self.target = 0, self.observation_space.sample()
        return self.target, {}

    def step(self, action):
        reward = float(np.array_equal(action, self.target))
        self.t, self.target = self.t + 1, self.observation_space.sample()
        return self.target, reward, False, self.t >= 100, {}


def test_batch_size_is_env_steps_per_minibatch_for_a_per_step_loss():
    model = GRPO("MlpPolicy", "CartPole-v1", n_steps=512, batch_size=64, seed=0)
    assert model.config.minibatch_tokens == 64 and model.config.num_minibatches == 1
    assert model.batch_size == 64


def test_batch_size_splits_whole_episodes_for_a_loss_over_episodes():
    # loss_type grpo averages each episode over its own steps: a minibatch of steps would cut that mean
    model = GRPO("MlpPolicy", "CartPole-v1", n_steps=2000, batch_size=500, seed=0, loss_type="grpo")
    assert model.config.minibatch_tokens == 0 and model.config.num_minibatches == 4  # 4 episodes, 2000 / 500


def test_batch_size_not_given_is_ppos_64_where_n_steps_shapes_the_rollout():
    assert GRPO("MlpPolicy", "CartPole-v1", n_steps=512, seed=0).config.minibatch_tokens == 64
    shaped = GRPO("MlpPolicy", "CartPole-v1", n_steps=512, seed=0)
    assert shaped.batch_size == 64  # what PPO's model.batch_size reads too
    own = GRPO("MlpPolicy", "CartPole-v1", seed=0)  # no n_steps: the env program's update, one step per pass
    assert own.config.minibatch_tokens == 0 and own.batch_size is None


def test_an_env_without_an_id_takes_centred_advantages_with_anchor_steps():
    custom = GRPO("MlpPolicy", _Copy(), seed=0).config
    assert custom.scale_rewards == "none" and custom.step_advantage_w == 1.0
    registered = GRPO("MlpPolicy", "CartPole-v1", seed=0).config  # CartPole's own tuned family
    assert registered.scale_rewards == "group" and registered.step_advantage_w == 0.0


def test_the_defaults_learn_the_joint_identity_in_1200_steps():
    # SB3's identity test, its MultiDiscrete case, as the test calls PPO: steps from the same
    # observation compared with each other (anchor states), centred advantages, PPO's minibatches of
    # 64 (docs/guides/sb3.md, "Measured by Stable-Baselines3's own tests")
    kw = dict(gamma=0.4, learning_rate=0.002, n_epochs=4, n_steps=256, seed=0)
    model = GRPO("MlpPolicy", _Copy(), **kw).learn(1200)
    env = _Copy()
    obs, _ = env.reset(seed=1)
    hits = 0
    for _ in range(100):
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, *_ = env.step(action)
        hits += reward
    assert hits >= 85  # random play: 100 / 16 = 6.25


def test_a_loaded_model_keeps_its_minibatches_of_env_steps(tmp_path):
    GRPO("MlpPolicy", "CartPole-v1", n_steps=512, batch_size=64, seed=0).save(tmp_path / "m")
    loaded = GRPO.load(tmp_path / "m", env="CartPole-v1")
    assert loaded.config.minibatch_tokens == 64 and loaded.config.num_minibatches == 1
