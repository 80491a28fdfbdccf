"""The algorithm the adapted Stable-Baselines3 tests run as ``PPO``: ``grpo_seq.sb3.GRPO``, or
Stable-Baselines3's own ``PPO`` with ``SB3_SUITE_ALGO=ppo`` (the comparison in docs/guides/sb3.md)."""

import os

ALGO = os.environ.get("SB3_SUITE_ALGO", "grpo")
if ALGO == "ppo":
    from stable_baselines3 import PPO
elif ALGO == "grpo":
    from grpo_seq.sb3 import GRPO as PPO
else:
    raise SystemExit(f"error: SB3_SUITE_ALGO={ALGO!r}: grpo or ppo")

__all__ = ["PPO"]
