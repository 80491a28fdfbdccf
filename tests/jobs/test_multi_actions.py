"""MultiDiscrete and MultiBinary actions through the env job and its command line: one token per
joint action, scored by one categorical per dimension (as Stable-Baselines3's PPO), and a saved
policy that plays the env again through ``eval env``."""

import json

import gymnasium as gym
import numpy as np
import pytest

from grpo_seq.cli.commands import main
from grpo_seq.sampling.env import action_nvec, make_env


class _Copy(gym.Env):
    """Each step shows a random target action; the reward is the number of dimensions the action
    gets right. Random play earns half a point per binary dimension and a third per 3-way one."""

    def __init__(self, action_space: gym.Space):
        self.action_space = action_space
        self.observation_space = action_space  # the target, one-hot encoded (MultiDiscrete) or 0/1 (MultiBinary)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.target = self._draw()
        return self.target, {}

    def _draw(self):
        self.action_space.seed(int(self.np_random.integers(2**31)))
        return self.action_space.sample()

    def step(self, action):
        reward = float(np.sum(np.asarray(action) == self.target))
        self.target = self._draw()
        return self.target, reward, False, False, {}


gym.register("CopyMD-v0", entry_point=lambda: _Copy(gym.spaces.MultiDiscrete([3, 3])), max_episode_steps=10,
             reward_threshold=18)
gym.register("CopyMB-v0", entry_point=lambda: _Copy(gym.spaces.MultiBinary(3)), max_episode_steps=10,
             reward_threshold=27)


def test_a_multi_dimensional_env_is_seen_as_tokens_with_its_dimensions():
    env = make_env("CopyMD-v0")
    assert env.action_space == gym.spaces.Discrete(9) and action_nvec(env) == [3, 3]
    assert env.observation_space.shape == (6,)  # two one-hot targets of 3
    obs, _ = env.reset(seed=0)
    target = env.unwrapped.target
    # token k = 3 d_0 + d_1: the token of the target's own digits earns both points
    assert env.step(3 * int(target[0]) + int(target[1]))[1] == 2.0
    assert action_nvec(make_env("CartPole-v1")) is None and make_env("CartPole-v1", tokens=False).spec.id == "CartPole-v1"


@pytest.mark.parametrize("env_id, random_play, best", [("CopyMD-v0", 20 / 3, 20), ("CopyMB-v0", 15, 30)])
def test_train_env_learns_a_multi_dimensional_action_and_eval_env_plays_it(tmp_path, capsys, monkeypatch, env_id,
                                                                           random_play, best):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    out = tmp_path / "run"
    main(["train-env", "--env_id", env_id, "--total_env_steps", "3000", "--eval_every", "1000", "--seed", "0",
          "--output_dir", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] == 3000
    # well above random play, per dimension and per step
    assert summary["final_eval_return"] > random_play + 0.5 * (best - random_play), summary
    saved = json.loads((out / "policy" / "policy.json").read_text())["kwargs"]
    assert saved["action_nvec"] == ([3, 3] if env_id == "CopyMD-v0" else [2, 2, 2])
    capsys.readouterr()
    main(["eval", "env", "--policy", str(out / "policy"), "--env_id", env_id, "--episodes", "5"])
    printed = capsys.readouterr().out
    assert env_id in printed, printed
