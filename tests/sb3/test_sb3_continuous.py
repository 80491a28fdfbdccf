"""Continuous (Box) actions through the SB3 door: one token per dimension over evenly spaced values."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from grpo_seq import GRPO
from grpo_seq.errors import UsageError
from grpo_seq.math.batch import RolloutBatch
from grpo_seq.sampling.spaces import ACTION_TABLE_MAX, SpaceCodec


class Target(gym.Env):
    """Observe a target in [-1, 1]; one action, rewarded by how close it lands."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = self.np_random.uniform(-1, 1, (1,)).astype(np.float32)
        return self.target.copy(), {}

    def step(self, action):
        return self.target.copy(), -float(abs(action[0] - self.target[0])), True, False, {}


def greedy_error(model, episodes=100):
    env, errors = Target(), []
    for s in range(episodes):
        obs, _ = env.reset(seed=50_000 + s)
        action, _ = model.predict(obs, deterministic=True)
        assert env.action_space.contains(action)
        errors.append(abs(float(action[0]) - float(obs[0])))
    return float(np.mean(errors))


def test_a_box_action_is_a_value_per_dimension_from_its_bins():
    act = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32), dtype=np.float32)
    codec = SpaceCodec(gym.spaces.Box(-1, 1, (3,)), act, action_bins=5)
    assert codec.action_nvec == [5, 5] and codec.num_actions == 25
    # token k = 5 d_0 + d_1; dimension 0 takes -2, -1, 0, 1, 2 and dimension 1 takes 0, .25, .5, .75, 1
    got = codec.decode_actions(np.array([0, 24, 5 * 2 + 4, 5 * 1 + 2]))
    np.testing.assert_allclose(got, [[-2.0, 0.0], [2.0, 1.0], [0.0, 1.0], [-1.0, 0.5]])
    assert got.dtype == np.float32


def test_a_large_action_space_decodes_its_digits_as_a_small_one_looks_them_up():
    # 17 ** 3 = 4913 joint actions: past the lookup table's size, decoded digit by digit
    act = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    large, small = SpaceCodec(gym.spaces.Box(-1, 1, (2,)), act, action_bins=17), SpaceCodec(
        gym.spaces.Box(-1, 1, (2,)), gym.spaces.Box(-1.0, 1.0, (2,), np.float32), action_bins=17)
    assert large.num_actions == 4913 > ACTION_TABLE_MAX >= small.num_actions
    # token k = 289 d_0 + 17 d_1 + d_2; bin b is -1 + b / 8
    np.testing.assert_allclose(large.decode_actions(np.array([0, 4912, 289 * 8 + 17 * 16 + 4])),
                               [[-1, -1, -1], [1, 1, 1], [0, 1, -0.5]])
    np.testing.assert_allclose(small.decode_actions(np.array([17 * 16 + 4])), [[1, -0.5]])
    for codec, token in ((large, 4912), (small, 5)):
        one = codec.decode_one(token)
        np.testing.assert_array_equal(one, codec.decode_actions(np.array([token]))[0])
        one[:] = 9.0  # an env that writes into its action changes no later one
        assert codec.decode_one(token).max() <= 1.0


def test_the_head_scores_each_dimension_as_one_decision():
    model = GRPO("MlpPolicy", gym.make("Pendulum-v1"), seed=0, policy_kwargs=dict(action_bins=3, action_head="categorical"))
    policy = model.policy
    with torch.no_grad():
        policy.net[-1].weight.zero_()
        policy.net[-1].bias.copy_(torch.tensor([0.0, 1.0, 2.0]))
    batch = RolloutBatch(context=torch.zeros(1, 1, 3), tokens=torch.tensor([[2]]), mask=torch.ones(1, 1, dtype=torch.bool),
                         group=torch.zeros(1, dtype=torch.long), num_generations=2, rewards=torch.zeros(1), partial=True)
    with torch.no_grad():
        logp, entropy = policy(batch)
    z = 1 + np.e + np.e**2
    assert float(logp) == pytest.approx(2 - np.log(z), abs=1e-5)  # softmax([0, 1, 2])[2]
    assert float(entropy) == pytest.approx(-sum(np.exp(v) / z * (v - np.log(z)) for v in (0, 1, 2)), abs=1e-5)
    action, _ = model.predict(np.zeros(3, np.float32), deterministic=True)
    assert action.tolist() == [2.0]  # the top bin of [-2, 2]


def test_a_registered_env_takes_its_jobs_head_and_values_unless_policy_kwargs_name_them(tmp_path):
    # grpo_seq/envs/defaults.py: Pendulum's Gaussian over 21 values, MountainCarContinuous's categorical over 3
    assert (GRPO("MlpPolicy", "Pendulum-v1", seed=0).policy.action_head, GRPO("MlpPolicy", "Pendulum-v1").policy.action_nvec) \
        == ("gaussian", [21])
    car = GRPO("MlpPolicy", gym.make("MountainCarContinuous-v0"), seed=0)
    assert (car.policy.action_head, car.policy.action_nvec) == ("categorical", [3])
    mine = GRPO("MlpPolicy", "Pendulum-v1", seed=0, policy_kwargs=dict(action_head="categorical", action_bins=7))
    assert (mine.policy.action_head, mine.policy.action_nvec) == ("categorical", [7])
    # a saved model takes a new env with the values it was built for
    mine.save(tmp_path / "m.zip")
    GRPO.load(tmp_path / "m.zip", env="Pendulum-v1").learn(400)
    with pytest.raises(UsageError, match=r"log_std_init=\.\.\.\)\): the Gaussian head's"):
        GRPO("MlpPolicy", "MountainCarContinuous-v0", policy_kwargs=dict(log_std_init=-1.0))
    for name, value in (("action_bins", 5), ("action_clip", [-1, 1])):  # nothing to cut in a discrete action
        with pytest.raises(UsageError, match=rf"{name}=\.\.\.\)\): cuts a continuous \(Box\) action .* Discrete\(2\)"):
            GRPO("MlpPolicy", "CartPole-v1", policy_kwargs={name: value})


def test_halfcheetah_takes_its_narrow_gaussian_unless_policy_kwargs_name_one():
    pytest.importorskip("mujoco")
    model = GRPO("MlpPolicy", "HalfCheetah-v5", seed=0)
    assert (model.policy.action_head, model.policy.action_nvec) == ("gaussian", [41] * 6)
    assert model.policy.log_std.tolist() == [-2.0] * 6  # the env's start, not SB3's 0
    assert model.config.obs_norm is False  # PPO's policy sees what the env (or a VecNormalize) gives
    mine = GRPO("MlpPolicy", "HalfCheetah-v5", seed=0, policy_kwargs=dict(log_std_init=-1.0))
    assert mine.policy.log_std.tolist() == [-1.0] * 6


def test_an_unbounded_action_needs_a_clip_range():
    class Free(Target):
        action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    with pytest.raises(UsageError, match=r"unbounded; give a clip range .*action_clip"):
        GRPO("MlpPolicy", Free(), seed=0)
    model = GRPO("MlpPolicy", Free(), seed=0, policy_kwargs=dict(action_clip=[-3, 3], action_bins=7))
    action, _ = model.predict(np.zeros(1, np.float32), deterministic=True)
    assert action.shape == (2,) and set(action.tolist()) <= {-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0}


@pytest.mark.parametrize("head", [{}, dict(action_head="gaussian", action_bins=21, log_std_init=-0.5)],
                         ids=["categorical", "gaussian"])
def test_a_continuous_policy_learns_saves_and_loads(tmp_path, head):
    model = GRPO("MlpPolicy", Target(), seed=0, group_size=8, learning_rate=5e-3, policy_kwargs=head)
    before = greedy_error(model)
    model.learn(4_000)  # 125 updates of four groups of 8 (one-step episodes: grpo_seq.sb3.short_episodes)
    after = greedy_error(model)
    # untrained: about one bin (the Gaussian's: the value nearest 0) for every target; trained: the
    # error of the nearest of the values plus a little: well under half the untrained error
    assert after < 0.5 * before, (before, after)
    model.save(tmp_path / "m.zip")
    loaded = GRPO.load(tmp_path / "m.zip")
    obs = np.array([[0.33], [-0.8]], np.float32)
    assert loaded.predict(obs, deterministic=True)[0].tolist() == model.predict(obs, deterministic=True)[0].tolist()
    if head:  # the Gaussian's log std is trained and saved with it
        assert loaded.policy.action_head == "gaussian" and model.policy.log_std.item() != -0.5
        assert loaded.policy.log_std.item() == pytest.approx(model.policy.log_std.item())
