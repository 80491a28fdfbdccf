"""GRPO on CartPole-v1: an episode's actions are the "completion", G episodes share a start state.

    accelerate launch recipes/cartpole.py                      # or: python recipes/cartpole.py
    accelerate launch --multi_gpu --num_processes 2 recipes/cartpole.py   # 2 CPU processes
    python recipes/cartpole.py --record                        # and a GIF of the trained agent
    python recipes/cartpole.py --help                          # every option

The program is grpo_seq/train_env.py with CartPole's defaults (one group of G = 2 episodes per
update, Adam at 2e-2 with momentum 0.5, observations in units of the termination thresholds;
its docstring says why each departs from the paper). Any other discrete env: recipes/gym_env.py.
"""

import sys

from grpo_seq.train_env import main

if __name__ == "__main__":
    main(["--env_id", "CartPole-v1", *sys.argv[1:]])
