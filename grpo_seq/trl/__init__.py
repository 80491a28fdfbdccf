"""TRL's surface over the GRPO trainer for language models: ``from grpo_seq.trl import GRPOConfig, GRPOTrainer``.

A thin layer (docs/DESIGN section 7): :class:`GRPOConfig` takes TRL's option names and maps them
onto :class:`grpo_seq.jobs.lm_spec.LMJob`; :class:`GRPOTrainer` loads the model, data and
reward functions the way TRL's does and trains with :func:`grpo_seq.jobs.lm.train`. TRL itself
is not needed. docs/guides/trl.md has the option table.
"""

from .config import GRPOConfig
from .trainer import GRPOTrainer

__all__ = ["GRPOConfig", "GRPOTrainer"]
