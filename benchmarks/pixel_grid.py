"""A pixel gridworld no default was tuned on, trained through the SB3 door as a user would:
``GRPO("CnnPolicy", env)`` on an env instance without a registered id, its image defaults or the
options a config gives, then the greedy policy over 50 held-out episodes.

    python benchmarks/pixel_grid.py --seeds 0 1 2 --configs '{}' '{"gamma": 0.98}' '{"random": true}' --out /tmp/grid.json

The env: a 10 x 10 x 3 uint8 image (H, W, C), the agent lit in channel 0 and a goal in channel 1,
both drawn at each reset; four moves; +1 and the end at the goal, -0.01 a step, and 0.1 for each
step closer to the goal (-0.1 further); 40 steps at most. The config ``{"random": true}`` trains
nothing and plays uniformly random moves (seeded by the seed), the baseline. Writes env_sweep's JSON (one summary per config, each row's ``final_eval`` the mean
greedy return), so that ``env_sweep.py --from_records`` puts it on the experiments page.
"""

from __future__ import annotations


import gymnasium as gym
import numpy as np

import door_sweep

EVAL_SEEDS = range(10_000, 10_050)


class PixelGrid(gym.Env):
    """The gridworld of the module docstring."""

    observation_space = gym.spaces.Box(0, 255, (10, 10, 3), np.uint8)
    action_space = gym.spaces.Discrete(4)
    MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])

    def _image(self) -> np.ndarray:
        image = np.zeros((10, 10, 3), np.uint8)
        image[self.agent[0], self.agent[1], 0] = image[self.goal[0], self.goal[1], 1] = 255
        return image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agent = self.np_random.integers(0, 10, 2)
        self.goal = self.agent
        while np.array_equal(self.goal, self.agent):
            self.goal = self.np_random.integers(0, 10, 2)
        return self._image(), {}

    def step(self, action):
        before = np.abs(self.agent - self.goal).sum()
        self.agent = np.clip(self.agent + self.MOVES[int(action)], 0, 9)
        after = np.abs(self.agent - self.goal).sum()
        reached = bool(after == 0)
        return self._image(), (1.0 if reached else -0.01) + 0.1 * float(before - after), reached, False, {}


def make() -> gym.Env:
    return gym.wrappers.TimeLimit(PixelGrid(), max_episode_steps=40)


if __name__ == "__main__":
    door_sweep.held_out(__doc__, "PixelGrid", "CnnPolicy", make, EVAL_SEEDS, 100_000)
