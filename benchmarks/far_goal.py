"""The sparse goal grid of goal_grid.py, farther to go: 8 x 8 cells (a 48 x 48 x 3 image) and 20
steps at most, so that random moves reach the goal in fewer episodes and a step's return says
nothing of a move in most groups. Trained through the SB3 door as a user would, ``{"ppo": true}``
trains SB3's PPO beside it; the greedy return is over 50 held-out episodes.

    python benchmarks/far_goal.py --seeds 0 1 2 3 4 --configs '{}' '{"ppo": true}' '{"random": true}' --out /tmp/far.json

Writes env_sweep's JSON (door_sweep.py).
"""

from __future__ import annotations

import gymnasium as gym

import door_sweep
from goal_grid import EVAL_SEEDS, GoalGrid


def make() -> gym.Env:
    return gym.wrappers.TimeLimit(GoalGrid(cells=8), max_episode_steps=20)


if __name__ == "__main__":
    door_sweep.held_out(__doc__, "FarGoal", "CnnPolicy", make, EVAL_SEEDS, 30_000)
