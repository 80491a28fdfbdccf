"""A Dict observation holding images in the env job: a torso per image part (SB3's CombinedExtractor)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from grpo_seq.jobs.env_spec import EnvJob


class _Samples(gym.Env):
    """One-step episodes of random observations from ``observation_space``."""

    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


class _ImageAndPos(_Samples):
    """A Dict of a uint8 image (channels last) and a position."""

    observation_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (10, 10, 2), np.uint8),
                                         "pos": gym.spaces.Box(-1, 1, (3,), np.float32)})


def test_the_env_job_gives_a_dicts_image_part_a_torso_of_its_own():
    from grpo_seq.jobs.env import make_policy
    from grpo_seq.policies.image_torso import ImageTorso, PartsTorso

    gym.register("ImageAndPosTest-v0", entry_point=_ImageAndPos, max_episode_steps=5)
    try:
        policy = make_policy(EnvJob(env_id="ImageAndPosTest-v0"))
    finally:
        gym.registry.pop("ImageAndPosTest-v0")
    torso = policy.net[0]
    assert isinstance(torso, PartsTorso) and torso.sizes == [200, 3]  # key order: the image, then the position
    assert isinstance(torso.torsos[0], ImageTorso) and torso.torsos[0].shape == (10, 10, 2) and torso.torsos[0].scale == 255.0
    assert policy.init_kwargs["obs_parts"][1] == {"size": 3} and policy.numpy_acting is False


class _Pixels(_Samples):
    """A uint8 image (channels last) and nothing else."""

    observation_space = gym.spaces.Box(0, 255, (10, 10, 2), np.uint8)


def test_an_image_env_of_the_default_family_takes_the_torsos_rate_and_group_unless_given(tmp_path):
    from grpo_seq.envs.defaults import IMAGES, per_env
    from grpo_seq.jobs.env import EnvRun

    family = per_env("PixelsTest-v0")
    assert (family["learning_rate"], family["num_generations"]) != (IMAGES["learning_rate"], IMAGES["num_generations"])
    gym.register("PixelsTest-v0", entry_point=_Pixels, max_episode_steps=5)
    try:
        left = EnvJob(env_id="PixelsTest-v0", output_dir=str(tmp_path / "a"), eval_every=0)
        assert left.learning_rate == family["learning_rate"]  # the family's, until the env is seen
        EnvRun(left)
        assert {k: getattr(left, k) for k in IMAGES} == IMAGES  # rate, group, passes, minibatches, horizon
        whole = EnvJob(env_id="PixelsTest-v0", loss_type="dr_grpo", output_dir=str(tmp_path / "w"), eval_every=0)
        EnvRun(whole)  # a loss over whole episodes takes no minibatches of steps, the rest as images do
        assert (whole.minibatch_tokens, whole.num_groups, whole.gamma) == (0, IMAGES["num_groups"], IMAGES["gamma"])
        given = EnvJob(env_id="PixelsTest-v0", learning_rate=5e-3, output_dir=str(tmp_path / "b"), eval_every=0)
        run = EnvRun(given)
        assert given.learning_rate == 5e-3 and given.num_generations == IMAGES["num_generations"]
        assert run.trainer.optimizer.param_groups[0]["lr"] == 5e-3
        # an env of numbers keeps its family's
        numbers = EnvJob(env_id="Acrobot-v1", output_dir=str(tmp_path / "c"), eval_every=0)
        EnvRun(numbers)
        assert numbers.learning_rate == per_env("Acrobot-v1")["learning_rate"]
    finally:
        gym.registry.pop("PixelsTest-v0")
