"""``policy_kwargs=dict(features_extractor_class=...)``: the user's own torso, fed as SB3 feeds it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from grpo_seq import GRPO
from grpo_seq.errors import UsageError

pytest.importorskip("stable_baselines3")
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor  # noqa: E402


class Seen(BaseFeaturesExtractor):
    """A linear torso that keeps the last batch it was given and the space it was built for."""

    def __init__(self, observation_space, features_dim=8):
        super().__init__(observation_space, features_dim)
        self.space, self.last = observation_space, None
        self.linear = nn.Linear(int(np.prod(observation_space.shape)), features_dim)

    def forward(self, x):
        self.last = x
        return torch.relu(self.linear(x.flatten(1)))


class Pixels(gym.Env):
    """A 6 x 8 x 2 uint8 image, channels last; the action that names the brighter channel pays 1."""

    observation_space = gym.spaces.Box(0, 255, (6, 8, 2), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.bright = int(self.np_random.integers(2))
        self.image = np.zeros((6, 8, 2), np.uint8)
        self.image[..., self.bright] = 200
        return self.image, {}

    def step(self, action):
        return self.image, float(action == self.bright), True, False, {}


def test_a_custom_extractor_reads_observations_as_sb3_gives_them_and_survives_save_and_load(tmp_path):
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0,
                 policy_kwargs=dict(features_extractor_class=Seen, features_extractor_kwargs=dict(features_dim=5)))
    torso = model.policy.net[0].extractor
    assert isinstance(torso, Seen) and torso.features_dim == 5 and model.policy.net[1].in_features == 5
    obs = np.array([[0.5, -1.0, 0.1, 2.0]], np.float32)
    model.predict(obs)
    torch.testing.assert_close(torso.last, torch.as_tensor(obs))  # raw units, as SB3's policy reads them
    acrobot = GRPO("MlpPolicy", "Acrobot-v1", seed=0, policy_kwargs=dict(features_extractor_class=Seen))
    assert acrobot._make_sampler(acrobot._source).bonus.cell.tolist() == [0.1] * 6  # its count bonus: raw units' cells
    model.learn(500)
    model.save(tmp_path / "m.zip")
    again = GRPO.load(tmp_path / "m.zip")
    batch = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    assert again.predict(batch, deterministic=True)[0].tolist() == model.predict(batch, deterministic=True)[0].tolist()


def test_an_image_reaches_the_extractor_channels_first_and_scaled():
    model = GRPO("CnnPolicy", Pixels(), seed=0, policy_kwargs=dict(features_extractor_class=Seen))
    torso = model.policy.net[0].extractor
    assert torso.space.shape == (2, 6, 8)  # as VecTransposeImage shows the space to SB3's extractor
    image, _ = Pixels().reset(seed=1)
    model.predict(image)
    torch.testing.assert_close(torso.last[0], torch.as_tensor(image).permute(2, 0, 1).float() / 255)
    model.learn(600)  # and learns through it
    env, hits = Pixels(), 0
    for seed in range(40):
        obs, _ = env.reset(seed=100 + seed)
        hits += int(model.predict(obs, deterministic=True)[0] == env.bright)
    assert hits >= 36, hits
    unscaled = GRPO("CnnPolicy", Pixels(), seed=0,
                    policy_kwargs=dict(features_extractor_class=Seen, normalize_images=False))
    unscaled.predict(image)
    assert float(unscaled.policy.net[0].extractor.last.max()) == 200.0


class Parts(BaseFeaturesExtractor):
    """A Dict's extractor: each part flattened and concatenated, the last dict of parts kept."""

    def __init__(self, observation_space, features_dim=6):
        super().__init__(observation_space, features_dim)
        self.space, self.last = observation_space, None
        width = sum(int(np.prod(part.shape)) for part in observation_space.spaces.values())
        self.linear = nn.Linear(width, features_dim)

    def forward(self, parts):
        self.last = parts
        return torch.tanh(self.linear(torch.cat([parts[k].flatten(1) for k in sorted(parts)], 1)))


class PixelsAndClock(Pixels):
    observation_space = gym.spaces.Dict({"image": Pixels.observation_space,
                                         "clock": gym.spaces.Box(-1, 1, (2,), np.float32)})

    def reset(self, *, seed=None, options=None):
        image, _ = super().reset(seed=seed)
        return {"image": image, "clock": np.array([0.25, -0.5], np.float32)}, {}

    def step(self, action):
        _, reward, *rest = super().step(action)
        return {"image": self.image, "clock": np.zeros(2, np.float32)}, reward, *rest


def test_a_dict_reaches_the_extractor_as_a_dict_of_its_parts(tmp_path):
    model = GRPO("MultiInputPolicy", PixelsAndClock(), seed=0, policy_kwargs=dict(features_extractor_class=Parts))
    torso = model.policy.net[0].extractor
    assert torso.space["image"].shape == (2, 6, 8) and torso.space["clock"].shape == (2,)
    obs, _ = PixelsAndClock().reset(seed=3)
    model.predict(obs)
    torch.testing.assert_close(torso.last["image"][0], torch.as_tensor(obs["image"]).permute(2, 0, 1).float() / 255)
    torch.testing.assert_close(torso.last["clock"][0], torch.as_tensor(obs["clock"]))
    model.learn(300)
    model.save(tmp_path / "m.zip")
    assert GRPO.load(tmp_path / "m.zip").predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]


def test_an_extractor_that_is_not_a_class_is_refused_by_name():
    with pytest.raises(UsageError, match=r"features_extractor_class=\.\.\.\)\): a class, as SB3 takes"):
        GRPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(features_extractor_class=Seen(gym.spaces.Box(-1, 1, (4,)))))


def test_an_extractor_that_cannot_be_imported_is_named():
    from grpo_seq.policies.extractor import ExtractorTorso
    from grpo_seq.sampling.spaces import space_to_json

    space = space_to_json(gym.spaces.Box(-1, 1, (3,), np.float32))
    with pytest.raises(UsageError, match="features_extractor_class gone.place:Thing: cannot be imported here"):
        ExtractorTorso({"class": "gone.place:Thing", "kwargs": {}, "space": space})


def test_an_extractor_the_saving_program_defined_loads_through_custom_objects(tmp_path):
    from grpo_seq.sb3.saving import SavedModelError

    class Local(Seen):  # defined here, so not importable by its path ("...<locals>.Local")
        pass

    model = GRPO("MlpPolicy", "CartPole-v1", seed=0, policy_kwargs=dict(features_extractor_class=Local)).learn(300)
    model.save(tmp_path / "m.zip")
    with pytest.raises(SavedModelError, match=r"<locals>\.Local: cannot be imported here .*custom_objects"):
        GRPO.load(tmp_path / "m.zip")
    again = GRPO.load(tmp_path / "m.zip", custom_objects={"features_extractor_class": Local})
    assert type(again.policy.net[0].extractor) is Local
    obs = np.array([[0.1, 0.2, -0.1, 0.3]], np.float32)
    assert again.predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]
