"""Dict observations through the SB3 door (MultiInputPolicy): each part encoded, then concatenated."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from grpo_seq import GRPO
from grpo_seq.sampling.spaces import SpaceCodec, space_from_json, space_to_json


class PickTheMode(gym.Env):
    """A position (noise) and a mode; the action that matches the mode pays 1."""

    observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32), "mode": gym.spaces.Discrete(3)})
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.mode = int(self.np_random.integers(3))
        return {"pos": self.np_random.uniform(-1, 1, 2).astype(np.float32), "mode": self.mode}, {}

    def step(self, action):
        return {"pos": np.zeros(2, np.float32), "mode": self.mode}, float(action == self.mode), True, False, {}


def accuracy(model, episodes=60):
    env, hits = PickTheMode(), 0
    for s in range(episodes):
        obs, _ = env.reset(seed=9_000 + s)
        hits += int(model.predict(obs, deterministic=True)[0] == obs["mode"])
    return hits / episodes


def test_a_dict_observation_is_its_parts_encoded_in_key_order_and_back():
    space = PickTheMode.observation_space
    codec = SpaceCodec(space, gym.spaces.Discrete(3))
    batch = {"mode": np.array([2, 0]), "pos": np.array([[0.5, -1.0], [0.0, 0.25]], np.float32)}
    flat = codec.encode_obs(batch)
    # gymnasium orders a Dict's keys: "mode" (one-hot of 3) before "pos"
    np.testing.assert_array_equal(flat, [[0, 0, 1, 0.5, -1.0], [1, 0, 0, 0.0, 0.25]])
    back = codec.decode_obs(flat)
    assert back["mode"].tolist() == [2, 0] and back["pos"].tolist() == batch["pos"].tolist()
    assert space_from_json(space_to_json(space)) == space


def test_multi_input_policy_learns_saves_and_predicts_a_batch(tmp_path):
    model = GRPO("MultiInputPolicy", PickTheMode(), seed=0, group_size=3, learning_rate=5e-3)
    before = accuracy(model)
    model.learn(1_500)
    assert before < 0.5 and accuracy(model) == 1.0  # the mode is all it needs; chance is 1/3
    model.save(tmp_path / "m.zip")
    loaded = GRPO.load(tmp_path / "m.zip")
    assert accuracy(loaded) == 1.0
    two = {"mode": np.array([1, 2]), "pos": np.zeros((2, 2), np.float32)}
    assert loaded.predict(two, deterministic=True)[0].tolist() == [1, 2]


class SideAndBonus(gym.Env):
    """A Dict of a 12 x 12 uint8 image with one lit column on the left or right half, and a
    position (noise): the action that names the lit half pays 1."""

    observation_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (12, 12, 1), np.uint8),
                                         "pos": gym.spaces.Box(-1, 1, (2,), np.float32)})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.side = int(self.np_random.integers(2))
        image = np.full((12, 12, 1), 40, np.uint8)
        image[:, int(self.np_random.integers(6)) + 6 * self.side] = 255
        return {"image": image, "pos": self.np_random.uniform(-1, 1, 2).astype(np.float32)}, {}

    def step(self, action):
        return self.observation_space.sample(), float(action == self.side), True, False, {}


def test_a_dict_holding_an_image_gets_a_torso_for_the_image_learns_and_reloads(tmp_path):
    import torch

    from grpo_seq.policies.image_torso import ImageTorso, PartsTorso

    model = GRPO("MultiInputPolicy", SideAndBonus(), seed=0, group_size=4, learning_rate=3e-3,
                 policy_kwargs=dict(features_extractor_kwargs=dict(cnn_output_dim=16)))
    torso = model.policy.net[0]
    assert isinstance(torso, PartsTorso) and torso.sizes == [144, 2] and torso.features == 16 + 2
    assert isinstance(torso.torsos[0], ImageTorso) and torso.torsos[0].scale == 255.0  # uint8 pixels, as SB3 scales
    # the flat observation split back into its parts: the image part alone reaches the convolution
    flat = torch.cat([torch.full((1, 144), 255.0), torch.tensor([[0.5, -0.5]])], dim=1)
    assert torch.equal(torso(flat)[0, 16:], torch.tensor([0.5, -0.5]))

    env = SideAndBonus()
    obs = [env.reset(seed=5_000 + s)[0] for s in range(40)]
    sides = []
    for s in range(40):
        env.reset(seed=5_000 + s)
        sides.append(env.side)
    hits = lambda m: sum(int(m.predict(o, deterministic=True)[0] == side) for o, side in zip(obs, sides)) / 40  # noqa: E731
    before = hits(model)
    model.learn(400)
    assert before <= 0.75 and hits(model) >= 0.9  # chance is a half
    model.save(tmp_path / "m.zip")
    loaded = GRPO.load(tmp_path / "m.zip")
    assert [loaded.predict(o, deterministic=True)[0] for o in obs] == [model.predict(o, deterministic=True)[0] for o in obs]


def test_a_dicts_frame_stack_per_env_is_sb3s_vec_frame_stack():
    from stable_baselines3.common.envs import SimpleMultiObsEnv
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

    from grpo_seq.sb3.vec_wrappers import per_env_wrappers

    def grid():  # its states' images and vectors are drawn from numpy's global generator when it is built
        state = np.random.get_state()
        np.random.seed(0)
        try:
            return SimpleMultiObsEnv(random_start=False)
        finally:
            np.random.set_state(state)

    orders = {"vec": None, "img": "first"}
    theirs = VecFrameStack(DummyVecEnv([grid]), 3, channels_order=orders)
    (wrap,) = per_env_wrappers(theirs)
    ours = wrap(grid())
    assert ours.observation_space == theirs.observation_space
    seen, _ = ours.reset(seed=0)
    expected = theirs.reset()
    for action in [1, 3, 0, 2, 2]:
        for key in expected:
            np.testing.assert_array_equal(seen[key], expected[key][0])
        seen = ours.step(action)[0]
        expected = theirs.step(np.array([action]))[0]
