"""Catch, a pixel game no default was tuned on, large enough for the Nature CNN, trained through the
SB3 door as a user would: ``GRPO("CnnPolicy", env)`` on an env instance without a registered id,
its image defaults or the options a config gives, then the greedy policy over 50 held-out
episodes; ``{"ppo": true}`` trains SB3's PPO beside it.

    python benchmarks/catch_pixels.py --seeds 0 1 2 --configs '{}' '{"ppo": true}' '{"random": true}' --out /tmp/catch.json

The env: 10 x 10 cells drawn 4 pixels wide, a 40 x 40 x 1 uint8 image; a ball falls from a random
column of the top row one row a step, a one-cell paddle on the bottom row moves left, stays or moves
right; +1 for a ball caught, -1 for one missed, three balls an episode (27 steps). The config
``{"random": true}`` trains nothing and plays uniformly random moves, the baseline. Writes
env_sweep's JSON (door_sweep.py).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import door_sweep

EVAL_SEEDS = range(10_000, 10_050)
CELLS, CELL, BALLS = 10, 4, 3


class Catch(gym.Env):
    """The game of the module docstring."""

    observation_space = gym.spaces.Box(0, 255, (CELLS * CELL, CELLS * CELL, 1), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def _image(self) -> np.ndarray:
        cells = np.zeros((CELLS, CELLS), np.uint8)
        cells[self.ball] = 255
        cells[CELLS - 1, self.paddle] = 128
        return np.kron(cells, np.ones((CELL, CELL), np.uint8))[:, :, None]

    def _drop(self) -> None:
        self.ball = (0, int(self.np_random.integers(CELLS)))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.paddle, self.balls_left = int(self.np_random.integers(CELLS)), BALLS
        self._drop()
        return self._image(), {}

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + int(action) - 1, 0, CELLS - 1))
        self.ball = (self.ball[0] + 1, self.ball[1])
        reward, done = 0.0, False
        if self.ball[0] == CELLS - 1:
            reward = 1.0 if self.paddle == self.ball[1] else -1.0
            self.balls_left -= 1
            done = self.balls_left == 0
            if not done:
                self._drop()
        return self._image(), reward, done, False, {}


if __name__ == "__main__":
    door_sweep.held_out(__doc__, "Catch", "CnnPolicy", Catch, EVAL_SEEDS, 30_000)
