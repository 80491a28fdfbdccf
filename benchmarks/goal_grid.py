"""A sparse-reward pixel gridworld no default was tuned on, large enough for the Nature CNN, trained
through the SB3 door as a user would: ``GRPO("CnnPolicy", env)`` on an env instance without a
registered id, its image defaults or the options a config gives, then the greedy policy over 50
held-out episodes; ``{"ppo": true}`` trains SB3's PPO beside it.

    python benchmarks/goal_grid.py --seeds 0 1 2 --configs '{}' '{"ppo": true}' '{"random": true}' --out /tmp/goal.json

The env: 6 x 6 cells drawn 6 pixels wide, a 36 x 36 x 3 uint8 image (H, W, C), the agent lit in
channel 0 and a goal in channel 1, both drawn at each reset; four moves; +1 and the end at the
goal, 0 otherwise; 30 steps at most. The only reward is reaching the goal, so a step's return
tells nothing of a move until some member of a group has reached it. The config
``{"random": true}`` trains nothing and plays uniformly random moves (seeded by the seed), the
baseline. Writes env_sweep's JSON (door_sweep.py).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import door_sweep

EVAL_SEEDS = range(10_000, 10_050)
CELLS, CELL = 6, 6


class GoalGrid(gym.Env):
    """The gridworld of the module docstring, ``cells`` x ``cells`` cells."""

    action_space = gym.spaces.Discrete(4)
    MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])

    def __init__(self, cells: int = CELLS):
        self.cells = cells
        self.observation_space = gym.spaces.Box(0, 255, (cells * CELL, cells * CELL, 3), np.uint8)

    def _image(self) -> np.ndarray:
        cells = np.zeros((self.cells, self.cells, 3), np.uint8)
        cells[self.agent[0], self.agent[1], 0] = cells[self.goal[0], self.goal[1], 1] = 255
        return np.kron(cells, np.ones((CELL, CELL, 1), np.uint8))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agent = self.np_random.integers(0, self.cells, 2)
        self.goal = self.agent
        while np.array_equal(self.goal, self.agent):
            self.goal = self.np_random.integers(0, self.cells, 2)
        return self._image(), {}

    def step(self, action):
        self.agent = np.clip(self.agent + self.MOVES[int(action)], 0, self.cells - 1)
        reached = bool(np.array_equal(self.agent, self.goal))
        return self._image(), float(reached), reached, False, {}


def make() -> gym.Env:
    return gym.wrappers.TimeLimit(GoalGrid(), max_episode_steps=30)


if __name__ == "__main__":
    door_sweep.held_out(__doc__, "GoalGrid", "CnnPolicy", make, EVAL_SEEDS, 30_000)
