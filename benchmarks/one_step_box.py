"""A one-step task with continuous actions that no default was tuned on, trained through the SB3
door as a user would: ``GRPO("MlpPolicy", env)`` on an env instance without a registered id, its
defaults or the options a config gives, then the greedy policy over 200 held-out episodes.

    python benchmarks/one_step_box.py --seeds 0 1 2 --configs '{}' '{"num_groups": 1}' '{"random": true}' --out /tmp/box.json

The env: an observation ``(x, y)`` drawn uniformly from [-1, 1]^2 at each reset; one action in a
Box with bounds [0, 1] x [-2, 2]; reward ``-(|a_0 - (x + 1) / 2| + |a_1 - 2y| / 2)`` (at most 0),
and the episode ends. The config ``{"random": true}`` trains nothing and plays uniformly random
actions (seeded by the seed), the baseline. Writes env_sweep's JSON (one summary per config, each
row's ``final_eval`` the mean greedy return), so that ``env_sweep.py --from_records`` puts it on
the experiments page.
"""

from __future__ import annotations


import gymnasium as gym
import numpy as np

import door_sweep

EVAL_SEEDS = range(10_000, 10_200)


class OneStepBox(gym.Env):
    """The task of the module docstring."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(np.array([0.0, -2.0], np.float32), np.array([1.0, 2.0], np.float32), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self.obs.copy(), {}

    def step(self, action):
        a = np.asarray(action, dtype=np.float64).reshape(2)
        reward = -(abs(a[0] - (self.obs[0] + 1) / 2) + abs(a[1] - 2 * self.obs[1]) / 2)
        return self.obs.copy(), float(reward), True, False, {}


if __name__ == "__main__":
    door_sweep.held_out(__doc__, "OneStepBox", "MlpPolicy", OneStepBox, EVAL_SEEDS, 20_000)
