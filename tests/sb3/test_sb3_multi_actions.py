"""MultiDiscrete and MultiBinary actions through the SB3 door: one categorical per dimension, as
SB3's PPO, the action still one token per decision; files saved before factorised heads still load."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from grpo_seq import GRPO, RolloutBatch
from grpo_seq.sb3.policy import GRPOPolicy


class _Pick(gym.Env):
    """Observation: a MultiDiscrete([3, 2]) target, shown again each step; reward 1 for naming it; 4 steps."""

    observation_space = gym.spaces.MultiDiscrete([3, 2])

    def __init__(self, action_space: gym.Space | None = None):
        self.action_space = action_space or gym.spaces.MultiDiscrete([3, 2])
        self.t, self.target = 0, np.zeros(2, dtype=np.int64)

    def reset(self, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t, self.target = 0, self.observation_space.sample()
        return self.target, {}

    def step(self, action):
        self.t += 1
        reward = float(np.array_equal(np.asarray(action)[:2], self.target))
        return self.target, reward, False, self.t >= 4, {}


def test_multidiscrete_actions_get_one_categorical_per_dimension(tmp_path):
    model = GRPO("MlpPolicy", _Pick(), n_steps=16, seed=0, policy_kwargs=dict(net_arch=[8])).learn(16)
    policy = model.policy
    assert policy.action_nvec == [3, 2] and policy.net[-1].out_features == 5  # 3 + 2 logits, 6 joint actions
    actions, _ = model.predict(np.array([[0, 1], [2, 0]]))
    assert actions.shape == (2, 2) and all(model.action_space.contains(a) for a in actions)
    # the trained batch's log-probs are per decision: the sum of the two dimensions' log-softmaxes
    batch = model._trainer.sampler.last_batch.to(policy.device)
    logits = policy.logits(batch.context)
    d0, d1 = batch.tokens // 2, batch.tokens % 2
    expected = (torch.log_softmax(logits[..., :3], -1).gather(-1, d0[..., None])
                + torch.log_softmax(logits[..., 3:], -1).gather(-1, d1[..., None]))[..., 0]
    torch.testing.assert_close(policy(batch)[0], expected)
    model.save(tmp_path / "m")
    loaded = GRPO.load(tmp_path / "m")
    obs = np.array([[0, 0], [1, 1], [2, 1]])
    assert loaded.policy.action_nvec == [3, 2]
    assert np.array_equal(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])


def test_multibinary_actions_get_one_bernoulli_choice_per_bit():
    model = GRPO("MlpPolicy", _Pick(gym.spaces.MultiBinary(3)), n_steps=16, seed=0).learn(16)
    assert model.policy.action_nvec == [2, 2, 2] and model.policy.net[-1].out_features == 6
    action, _ = model.predict(np.array([1, 0]))
    assert action.shape == (3,) and model.action_space.contains(action)


def test_a_policy_file_without_action_nvec_is_a_joint_head(tmp_path):
    """A file written before factorised heads has one categorical over the joint actions: it loads as one."""
    spaces = (gym.spaces.Box(-1, 1, (2,)), gym.spaces.MultiDiscrete([3, 2]))
    old = GRPOPolicy(*spaces, action_nvec=None, hidden_sizes=(4,))
    assert "action_nvec" not in old.init_kwargs and old.net[-1].out_features == 6
    old.save(tmp_path / "p")
    loaded = GRPOPolicy.load(tmp_path / "p")
    assert loaded.action_nvec is None and loaded.net[-1].out_features == 6
    obs = np.array([[0.5, -0.5]], dtype=np.float32)
    assert np.array_equal(loaded.predict(obs, deterministic=True)[0], old.predict(obs, deterministic=True)[0])
    fresh = GRPOPolicy(*spaces, hidden_sizes=(4,))
    fresh.save(tmp_path / "q")
    assert GRPOPolicy.load(tmp_path / "q").action_nvec == [3, 2]


def test_discrete_actions_keep_one_categorical():
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0)
    assert model.policy.action_nvec is None and "action_nvec" not in model.policy.init_kwargs


def test_the_codec_and_the_policy_agree_on_the_digits():
    policy = GRPOPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.MultiDiscrete([3, 2]), hidden_sizes=())
    with torch.no_grad():  # dimension 0 prefers 2, dimension 1 prefers 1: token 2 * 2 + 1 = 5
        policy.net[-1].weight.zero_()
        policy.net[-1].bias.copy_(torch.tensor([0.0, 0.0, 5.0, 0.0, 5.0]))
    action, _ = policy.predict(np.zeros(2, dtype=np.float32), deterministic=True)
    assert action.tolist() == [2, 1]
    batch = RolloutBatch(context=torch.zeros(2, 1, 2), tokens=torch.tensor([[5], [0]]),
                         mask=torch.ones(2, 1, dtype=torch.bool), group=torch.zeros(2, dtype=torch.long), num_generations=2,
                         rewards=torch.zeros(2))
    logp, _ = policy(batch)
    # (2, 1): log(e^5 / (e^5 + 2)) + log(e^5 / (e^5 + 1)); (0, 0): log(1 / (e^5 + 2)) + log(1 / (e^5 + 1))
    e5 = math.exp(5.0)
    expected = [math.log(e5 / (e5 + 2)) + math.log(e5 / (e5 + 1)), -math.log(e5 + 2) - math.log(e5 + 1)]
    torch.testing.assert_close(logp[:, 0], torch.tensor(expected))


def test_alternatives_over_a_huge_joint_space_asks_for_a_group_size():
    import pytest

    from grpo_seq.errors import UsageError

    env = _Pick(gym.spaces.MultiBinary(20))  # 2**20 joint actions: trying each one at a state is refused
    with pytest.raises(UsageError, match=r"has 1048576; pass group_size"):
        GRPO("MlpPolicy", env, group_mode="alternatives", seed=0)
    model = GRPO("MlpPolicy", env, group_mode="alternatives", group_size=8, seed=0)
    assert model.config.num_generations == 8
