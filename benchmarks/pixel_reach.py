"""Continuous actions from pixels, a task no default was tuned on, trained through the SB3 door as a
user would: ``GRPO("CnnPolicy", env)`` on an env instance without a registered id, its defaults for
images and for a ``Box`` action or the options a config gives, then the greedy policy over 50
held-out episodes; ``{"ppo": true}`` trains SB3's PPO beside it.

    python benchmarks/pixel_reach.py --seeds 0 1 2 --configs '{}' '{"ppo": true}' '{"random": true}' --out /tmp/reach.json

The env: a 36 x 36 x 1 uint8 image of two 3 x 3 dots in the unit square, the agent (255) and a
target (128), both drawn at each reset; an action in ``Box(-1, 1, (2,))`` moves the agent by a tenth
of it; the reward is how much nearer the target the move took it, less 0.01, and +1 and the end
within 0.08 of the target; 40 steps at most. The config ``{"random": true}`` trains nothing and
plays uniformly random actions, the baseline. Writes env_sweep's JSON (door_sweep.py).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import door_sweep

EVAL_SEEDS = range(10_000, 10_050)
SIZE, STEP, REACH = 36, 0.1, 0.08


class PixelReach(gym.Env):
    """The task of the module docstring."""

    observation_space = gym.spaces.Box(0, 255, (SIZE, SIZE, 1), np.uint8)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def _image(self) -> np.ndarray:
        image = np.zeros((SIZE, SIZE, 1), np.uint8)
        for point, value in ((self.target, 128), (self.agent, 255)):
            r, c = np.clip((point * (SIZE - 1)).round().astype(int), 0, SIZE - 1)
            image[max(r - 1, 0):r + 2, max(c - 1, 0):c + 2, 0] = value
        return image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agent, self.target = self.np_random.uniform(0, 1, 2), self.np_random.uniform(0, 1, 2)
        return self._image(), {}

    def step(self, action):
        move = np.clip(np.asarray(action, np.float64).reshape(2), -1, 1)
        before = np.linalg.norm(self.agent - self.target)
        self.agent = np.clip(self.agent + STEP * move, 0, 1)
        after = np.linalg.norm(self.agent - self.target)
        reached = bool(after < REACH)
        return self._image(), float(before - after - 0.01 + reached), reached, False, {}


def make() -> gym.Env:
    return gym.wrappers.TimeLimit(PixelReach(), max_episode_steps=40)


if __name__ == "__main__":
    door_sweep.held_out(__doc__, "PixelReach", "CnnPolicy", make, EVAL_SEEDS, 100_000)
