"""GRPO on any discrete-action gymnasium env: the program is `grpo-seq train-env`
(grpo_seq/cli/programs.py); this file runs it from a checkout.

    python recipes/gym_env.py --env_id Acrobot-v1
    python recipes/gym_env.py --env_id LunarLander-v3      # needs box2d: pip install -e ".[control]"
    accelerate launch --multi_gpu --num_processes 2 recipes/gym_env.py --env_id MountainCar-v0
    python recipes/gym_env.py --config runs/<run>/config.json --output_dir runs/again   # repeat a run
    python recipes/gym_env.py --help                       # every option, with its per-env default

Each option left unset takes its env family's default (grpo_seq/envs/defaults.py), and the
solved threshold is the env spec's reward_threshold.
"""

from grpo_seq.cli.programs import train_env

if __name__ == "__main__":
    train_env()
