"""Stable-Baselines3's surface over the GRPO trainer: ``from grpo_seq import GRPO``.

A thin layer (docs/DESIGN section 7): :class:`GRPO` maps SB3's names onto :class:`grpo_seq.LoopConfig`
and drives :class:`grpo_seq.GRPOLoop` with the env samplers; nothing here trains on its own.
Stable-Baselines3 itself is optional: it is imported for a list of callbacks, for ``model.env``'s
``DummyVecEnv`` and ``Monitor`` and for its ``Logger``, where installed.
"""

from .model import GRPO
from .policy import GRPOPolicy

__all__ = ["GRPO", "GRPOPolicy"]
