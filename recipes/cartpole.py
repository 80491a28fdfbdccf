"""GRPO on CartPole-v1: an episode's actions are the "completion", G episodes share a start state.

    accelerate launch recipes/cartpole.py                      # or: python recipes/cartpole.py
    accelerate launch --multi_gpu --num_processes 2 recipes/cartpole.py   # 2 CPU processes
    python recipes/cartpole.py --record                        # and a GIF of the trained agent
    python recipes/cartpole.py --help                          # every option

The program is `grpo-seq train-env` (grpo_seq/cli/programs.py) with CartPole's defaults (one
group of G = 2 episodes per update, Adam at 2e-2 with momentum 0.5, observations in units of the
termination thresholds: grpo_seq/envs/defaults.py); grpo_seq/jobs/env.py says where the run
departs from the paper, and why. Any other discrete env: recipes/gym_env.py.
"""

import sys

from grpo_seq.cli.programs import train_env

if __name__ == "__main__":
    train_env(["--env_id", "CartPole-v1", *sys.argv[1:]])
