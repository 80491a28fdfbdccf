"""Stable-Baselines3's surface over the GRPO trainer: ``from grpo_seq import GRPO``.

A thin layer (docs/DESIGN section 7): :class:`GRPO` maps SB3's names onto :class:`grpo_seq.GRPOConfig`
and drives :class:`grpo_seq.GRPOTrainer` with the env samplers; nothing here trains on its own.
Stable-Baselines3 itself is optional: it is only imported for a list of callbacks and for
``get_env()``'s ``DummyVecEnv``.
"""

from .model import GRPO

__all__ = ["GRPO"]
