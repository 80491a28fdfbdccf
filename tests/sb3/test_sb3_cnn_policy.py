"""Image observations through the SB3 door (CnnPolicy): a convolutional torso before the head."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from grpo_seq import GRPO
from grpo_seq.errors import UsageError
from grpo_seq.policies.image_torso import ImageTorso


class BrightSide(gym.Env):
    """A 12 x 12 grey image (height, width, channels) with one lit column on the left or the right
    half; the action that names the half pays 1."""

    observation_space = gym.spaces.Box(0, 255, (12, 12, 1), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.side = int(self.np_random.integers(2))
        image = np.full((12, 12, 1), 40, np.uint8)
        image[:, int(self.np_random.integers(6)) + 6 * self.side] = 255
        return image, {}

    def step(self, action):
        return np.zeros((12, 12, 1), np.uint8), float(action == self.side), True, False, {}


def accuracy(model, episodes=60):
    env, hits = BrightSide(), 0
    for s in range(episodes):
        obs, _ = env.reset(seed=7_000 + s)
        hits += int(model.predict(obs, deterministic=True)[0] == env.side)
    return hits / episodes


def test_the_torso_reads_a_flat_image_channels_last_as_channels_first():
    torso = ImageTorso((5, 6, 2), scale=255.0)
    image = torch.rand(5, 6, 2) * 255
    conv_in = image.permute(2, 0, 1)[None] / 255.0  # what a channels-first network sees
    assert torso.conv[0].in_channels == 2 and torso.features == 128  # small images: the MinAtar network
    torch.testing.assert_close(torso(image.reshape(1, -1)), torso.linear(torso.conv(conv_in)))


def test_cnn_policy_learns_from_pixels_saves_and_loads(tmp_path):
    model = GRPO("CnnPolicy", BrightSide(), seed=0)  # the images defaults: G 4, Adam at 1e-3
    assert model.policy.init_kwargs["image_scale"] == 255.0 and model.policy.net_arch == []
    before = accuracy(model)
    model.learn(600)
    after = accuracy(model)
    assert after >= 0.9 and after > before, (before, after)
    model.save(tmp_path / "m.zip")
    assert accuracy(GRPO.load(tmp_path / "m.zip")) == after


def test_cnn_policy_needs_images():
    with pytest.raises(UsageError, match=r"CnnPolicy.*must be images"):
        GRPO("CnnPolicy", "CartPole-v1")


def test_the_env_job_gives_an_image_env_a_convolutional_policy(tmp_path):
    from grpo_seq.jobs.env import make_policy
    from grpo_seq.jobs.env_spec import EnvJob

    gym.register("BrightSide-v0", entry_point=BrightSide, max_episode_steps=1)
    try:
        policy = make_policy(EnvJob(env_id="BrightSide-v0", solved_return=0.9, output_dir=str(tmp_path)))
    finally:
        gym.registry.pop("BrightSide-v0")
    assert policy.init_kwargs["image_shape"] == [12, 12, 1] and policy.init_kwargs["image_scale"] == 255.0
    assert isinstance(policy.net[0], ImageTorso) and policy.init_kwargs["obs_scale"] is None


def test_frame_stacked_and_transposed_images_train_on_what_predict_is_given():
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecTransposeImage

    vec = VecTransposeImage(VecFrameStack(DummyVecEnv([BrightSide]), 3))  # (12, 12, 1) -> (12, 12, 3) -> (3, 12, 12)
    model = GRPO("CnnPolicy", vec, seed=0)
    assert model.policy.init_kwargs["image_shape"] == [3, 12, 12]
    model.learn(600)
    # the sampler's envs stack and transpose as the user's VecEnv does: its observations are the policy's
    flat, _ = model._source.make().reset(seed=1)  # what the sampler steps: flattened for the policy
    first = flat.reshape(3, 12, 12)
    assert (first[:2] == 0).all() and (first[2] > 0).all()  # zeros before the episode's first frame
    hits = 0
    for s in range(60):
        vec.seed(7_000 + s)
        obs = vec.reset()
        side = vec.venv.venv.envs[0].side
        hits += int(model.predict(obs, deterministic=True)[0][0] == side)
    assert hits / 60 >= 0.9


def test_a_vec_normalize_under_a_frame_stack_is_refused():
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecNormalize

    inner = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]))
    with pytest.raises(UsageError, match="a VecNormalize inside VecFrameStack; put the VecNormalize outside it"):
        GRPO("MlpPolicy", VecFrameStack(inner, 2))


def test_sb3s_torso_options_set_its_width_and_scale_and_survive_save_and_load(tmp_path):
    model = GRPO("CnnPolicy", BrightSide(), n_steps=16, seed=0, policy_kwargs=dict(
        features_extractor_kwargs=dict(features_dim=24), normalize_images=False, share_features_extractor=False))
    torso = model.policy.net[0]
    assert isinstance(torso, ImageTorso) and torso.features == 24 and torso.scale == 1.0  # pixels as they are
    obs, _ = BrightSide().reset(seed=3)
    action = model.predict(obs, deterministic=True)[0]
    model.save(tmp_path / "m")
    again = GRPO.load(tmp_path / "m")
    assert again.policy.net[0].features == 24 and again.policy.net[0].scale == 1.0
    assert again.predict(obs, deterministic=True)[0] == action
    with pytest.raises(UsageError, match="features_dim"):  # the torso's width: only a CNN has one
        GRPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(features_extractor_kwargs=dict(features_dim=8)))
    with pytest.raises(UsageError, match="the width of each image part's torso"):
        GRPO("CnnPolicy", BrightSide(), policy_kwargs=dict(features_extractor_kwargs=dict(cnn_output_dim=8)))
    dict_env = gym.wrappers.TimeLimit(DictOf(BrightSide()), 5)
    with pytest.raises(UsageError, match="'MultiInputPolicy' when working with dict observation space"):
        GRPO("MlpPolicy", dict_env)


class DictOf(gym.ObservationWrapper):
    """The image as the one part of a Dict observation."""

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = gym.spaces.Dict({"image": env.observation_space})

    def observation(self, obs):
        return {"image": obs}


def test_the_door_trains_the_env_as_given_without_the_familys_wrappers():
    from grpo_seq.sb3.arguments import build_config

    sb3 = dict.fromkeys(("n_steps", "batch_size"))
    # the Atari family wraps ALE's envs on the command line; SB3's user wraps them (make_atari_env)
    door = build_config(sb3, {}, n_envs=1, max_episode_steps=4_500, steps_per_group=None, env_id="ALE/Pong-v5",
                        images=True)
    assert door.env_wrappers == [] and door.learning_rate == 1e-3  # the image defaults still hold
    named = build_config(sb3, {"env_wrappers": ["grpo_seq.envs.atari:atari_wrapper"]}, n_envs=1,
                         max_episode_steps=4_500, steps_per_group=None, env_id="ALE/Pong-v5", images=True)
    assert named.env_wrappers == ["grpo_seq.envs.atari:atari_wrapper"]  # asked for by name: kept


def test_cnn_policy_takes_the_image_defaults_and_sb3s_arguments_over_them():
    from grpo_seq.envs.defaults import IMAGES

    cfg = GRPO("CnnPolicy", BrightSide(), seed=0).config
    assert {k: getattr(cfg, k) for k in IMAGES} == IMAGES
    assert GRPO("CnnPolicy", BrightSide(), seed=0, loss_type="dr_grpo").config.minibatch_tokens == 0  # whole episodes
    given = GRPO("CnnPolicy", BrightSide(), seed=0, n_steps=64, batch_size=16, n_epochs=2, gamma=0.99).config
    assert (given.mu, given.minibatch_tokens, given.gamma) == (2, 16, 0.99)


class Frames(gym.Env):
    """Atari's shape after SB3's wrappers: 84 x 84 pixels, four frames stacked as channels."""

    observation_space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.integers(0, 256, (84, 84, 4), dtype=np.uint8), {}

    def step(self, action):
        return self.np_random.integers(0, 256, (84, 84, 4), dtype=np.uint8), float(action), True, False, {}


def test_an_atari_sized_model_saves_and_loads_with_its_last_observation(tmp_path):
    import zipfile

    from grpo_seq.sb3.saving import MAX_JSON_BYTES

    model = GRPO("CnnPolicy", Frames(), n_steps=8, n_epochs=1, seed=0)
    model.learn(8)
    model.save(tmp_path / "m")
    with zipfile.ZipFile(tmp_path / "m.zip") as z:  # the pixels' bounds and the last frames are not JSON lists
        assert z.getinfo("grpo.json").file_size < MAX_JSON_BYTES // 100 and z.getinfo("data").file_size < MAX_JSON_BYTES // 100
    again = GRPO.load(tmp_path / "m", env=Frames(), force_reset=False)
    assert again.observation_space == Frames.observation_space
    np.testing.assert_array_equal(again._last_obs, model._last_obs)
    assert again._last_obs.dtype == np.uint8 and again._last_obs.shape == model._last_obs.shape
    obs = Frames().reset(seed=1)[0]
    assert again.predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]


def test_a_file_of_format_1_still_loads_with_its_last_observation_as_json(tmp_path):
    import json
    import zipfile

    model = GRPO("CnnPolicy", BrightSide(), n_steps=4, n_epochs=1, seed=0)
    model.learn(4)
    model.save(tmp_path / "new.zip")
    with zipfile.ZipFile(tmp_path / "new.zip") as src, zipfile.ZipFile(tmp_path / "old.zip", "w") as dst:
        for name in src.namelist():
            if name == "grpo.json":  # as format 1 wrote it: the bounds and the last observation as lists
                meta = json.loads(src.read(name))
                space = BrightSide.observation_space
                meta.update(format="grpo-seq GRPO 1", last_obs=model._last_obs.tolist())
                meta["spaces"]["observation_space"] = {"type": "Box", "low": space.low.tolist(),
                                                       "high": space.high.tolist(), "dtype": "uint8"}
                dst.writestr(name, json.dumps(meta))
            elif name != "last_obs.safetensors":
                dst.writestr(name, src.read(name))
    old = GRPO.load(tmp_path / "old.zip", env=BrightSide(), force_reset=False)
    assert old.observation_space == BrightSide.observation_space
    np.testing.assert_array_equal(old._last_obs, model._last_obs)


def test_an_exploration_bonus_asked_for_on_images_counts_frames():
    default = GRPO("CnnPolicy", BrightSide(), seed=0)
    assert default.config.exploration_bonus == 0.0 and default._make_sampler(default._source).bonus is None
    asked = GRPO("CnnPolicy", BrightSide(), seed=0, exploration_bonus=0.05)
    bonus = asked._make_sampler(asked._source).bonus
    assert bonus is not None and bonus.scale == 0.05 and bonus.cell is None  # each distinct frame its own cell
