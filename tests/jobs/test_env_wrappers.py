"""Wrappers named by import path (grpo_seq/sampling/env_wrappers.py) around a job's env: in training,
evaluation and acting alike; MiniGrid's family default."""

from __future__ import annotations

import json

import pytest

from grpo_seq.errors import UsageError
from grpo_seq.sampling.env import make_env
from grpo_seq.sampling.env_wrappers import load_wrappers

TIME = "gymnasium.wrappers:TimeAwareObservation"  # CartPole's 4 numbers and the step count: 5


@pytest.mark.parametrize("path, says", [
    ("TimeAwareObservation", "'TimeAwareObservation' is not an import path; give module:Wrapper"),
    ("no_such_pkg:W", "'no_such_pkg:W': cannot import no_such_pkg"),
    ("gymnasium.wrappers:NoSuchWrapper", "'gymnasium.wrappers:NoSuchWrapper': gymnasium.wrappers has no class or "
                                         "function 'NoSuchWrapper'"),
])
def test_a_path_that_names_no_wrapper_is_one_line_naming_the_option(path, says):
    with pytest.raises(UsageError) as e:
        load_wrappers([path])
    assert str(e.value).startswith(f"--env_wrappers: {says}") and "\n" not in str(e.value)


def test_both_spellings_load_the_same_class_and_wrap_innermost_first():
    import gymnasium as gym

    assert load_wrappers([TIME]) == load_wrappers(["gymnasium.wrappers.TimeAwareObservation"]) == \
        [gym.wrappers.TimeAwareObservation]
    env = make_env("CartPole-v1", wrappers=load_wrappers([TIME, "gymnasium.wrappers:RecordEpisodeStatistics"]))
    assert env.observation_space.shape == (5,)
    assert isinstance(env, gym.wrappers.RecordEpisodeStatistics) and isinstance(env.env, gym.wrappers.TimeAwareObservation)


def test_a_job_trains_evaluates_and_acts_inside_its_wrappers(tmp_path, capsys):
    from grpo_seq.cli.tools import eval_env
    from grpo_seq.io.serialization import load_policy
    from grpo_seq.jobs.env import run_env_job
    from grpo_seq.jobs.env_spec import EnvJob

    spec = EnvJob(env_id="CartPole-v1", env_wrappers=[TIME], total_env_steps=1_000, eval_every=500,
                  eval_episodes=2, output_dir=str(tmp_path / "run"), seed=0)
    assert run_env_job(spec)["final_eval_return"] > 0  # evaluated inside the wrapper too
    assert load_policy(str(tmp_path / "run" / "policy")).init_kwargs["obs_dim"] == 5
    capsys.readouterr()
    eval_env(["--policy", str(tmp_path / "run" / "policy"), "--episodes", "2", "--env_wrappers", TIME])
    assert len(json.loads(capsys.readouterr().out)["returns"]) == 2
    with pytest.raises(SystemExit):  # without the wrapper the policy's inputs do not fit: one line, exit 2
        eval_env(["--policy", str(tmp_path / "run" / "policy"), "--episodes", "2"])
    assert "takes 5 observation numbers; CartPole-v1 gives 4" in capsys.readouterr().err


def test_minigrid_envs_take_rl_zoos_flat_wrapper_by_default():
    from grpo_seq.jobs.env_spec import EnvJob

    spec = EnvJob(env_id="MiniGrid-DoorKey-5x5-v0")
    assert spec.env_wrappers == ["minigrid.wrappers:FlatObsWrapper"] and spec.max_episode_steps == 2_000
    assert EnvJob(env_id="CartPole-v1").env_wrappers is None
    pytest.importorskip("minigrid")
    env = make_env("MiniGrid-Empty-5x5-v0", wrappers=load_wrappers(spec.env_wrappers))  # registered on first use
    assert len(env.observation_space.shape) == 1


def test_atari_envs_take_sb3s_preprocessing_and_four_stacked_frames_by_default():
    from grpo_seq.jobs.env_spec import EnvJob
    from grpo_seq.policies.image_torso import ImageTorso, channels_last

    from grpo_seq.envs.defaults import IMAGES

    spec = EnvJob(env_id="ALE/Pong-v5")
    assert spec.env_wrappers == ["grpo_seq.envs.atari:atari_wrapper"] and spec.max_episode_steps == 4_500
    for pixels in (spec, EnvJob(env_id="MinAtar/Breakout-v1")):  # the image defaults, as in the SB3 door
        assert (pixels.learning_rate, pixels.num_generations) == (IMAGES["learning_rate"], IMAGES["num_generations"])
    assert EnvJob(env_id="Acrobot-v1").learning_rate != IMAGES["learning_rate"]
    for package in ("ale_py", "cv2", "stable_baselines3"):
        pytest.importorskip(package)
    env = make_env("ALE/Pong-v5", tokens=False, wrappers=load_wrappers(spec.env_wrappers))  # registered on first use
    obs, _ = env.reset(seed=0)
    # 84 x 84 grey frames, the last 4 as channels first, as SB3's VecFrameStack + VecTransposeImage give them
    assert obs.shape == env.observation_space.shape == (4, 84, 84) and obs.dtype.name == "uint8"
    assert not channels_last(obs.shape) and ImageTorso(obs.shape).features == 512  # the Nature CNN
    again, _ = make_env("ALE/Pong-v5", tokens=False, wrappers=load_wrappers(spec.env_wrappers)).reset(seed=0)
    assert (again == obs).all()  # a seeded reset starts a group's members alike (no-op starts included)
    # a v5 env repeats each action for 4 frames itself: the wrapper skips none on top (a step is 4 frames)
    frames = env.unwrapped.ale.getEpisodeFrameNumber()
    env.step(0)
    assert env.unwrapped.ale.getEpisodeFrameNumber() - frames == 4


def test_car_racing_takes_rl_zoos_frames_two_stacked_by_default():
    import gymnasium as gym
    import numpy as np

    from grpo_seq.envs.car_racing import car_racing_wrapper
    from grpo_seq.envs.defaults import IMAGES
    from grpo_seq.jobs.env_spec import EnvJob

    spec = EnvJob(env_id="CarRacing-v3")
    assert spec.env_wrappers == ["grpo_seq.envs.car_racing:car_racing_wrapper"]
    assert (spec.learning_rate, spec.num_generations) == (IMAGES["learning_rate"], IMAGES["num_generations"])
    for package in ("cv2", "rl_zoo3"):
        pytest.importorskip(package)

    class Road(gym.Env):  # CarRacing's frames and actions, a reward of 1 a frame
        observation_space = gym.spaces.Box(0, 255, (96, 96, 3), np.uint8)
        action_space = gym.spaces.Box(np.array([-1.0, 0.0, 0.0]), 1.0, dtype=np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.frames = 0
            return self.observation_space.sample(), {}

        def step(self, action):
            self.frames += 1
            return np.full((96, 96, 3), 200, np.uint8), 1.0, False, self.frames >= 3, {}

    env = car_racing_wrapper(Road())
    obs, _ = env.reset(seed=0)
    assert obs.shape == env.observation_space.shape == (2, 64, 64) and obs.dtype.name == "uint8"
    obs, reward, _, truncated, _ = env.step(env.action_space.sample())
    assert reward == 2.0 and not truncated and (obs[-1] == 200).all()  # two frames a step, grey kept at 200
    assert env.step(env.action_space.sample())[1:4] == (1.0, False, True)  # the third frame ends it: one summed
