"""GRPO on any discrete-action gymnasium env: the program is grpo_seq/train_env.py (also the
installed `grpo-seq train-env`); this file runs it from a checkout.

    python recipes/gym_env.py --env_id Acrobot-v1
    python recipes/gym_env.py --env_id LunarLander-v3      # needs box2d: pip install -e ".[control]"
    accelerate launch --multi_gpu --num_processes 2 recipes/gym_env.py --env_id MountainCar-v0
    python recipes/gym_env.py --help                       # every option, with its per-env default

Each option left unset takes its env family's default (grpo_seq.train_env.ENV_DEFAULTS), and the
solved threshold is the env spec's reward_threshold.
"""

from grpo_seq.train_env import main

if __name__ == "__main__":
    main()
