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
