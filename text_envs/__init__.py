"""Text environments of particular tasks, kept outside the library (which knows no task), as a
user's own module would be: ``--env_id text_envs.gsm8k_calculator:GSM8KCalculator-v0``."""
