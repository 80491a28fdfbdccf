"""grpo-seq: GRPO on any token sequence, text or actions.

The public names below load on first use (PEP 562), so importing one light module, such as
``grpo_seq.math.objective`` or ``grpo_seq.math.advantages``, does not pull in the trainer, accelerate,
transformers or gymnasium.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .math.advantages import compute_advantages, outcome_advantages, process_advantages, stepwise_return_advantages
    from .math.batch import RolloutBatch
    from .loop.config import LoopConfig
    from .envs.text import TextEnvGroupSampler
    from .math.objective import aggregate, clipped_surrogate, grpo_loss, k3_kl, probability_ratio, token_logprobs
    from .policies import CategoricalMLPPolicy, CausalLMPolicy
    from .policies.actor import make_actor
    from .scoring.rewards import RewardScorer, load_reward_fn
    from .sampling import EnvGroupSampler, GroupSampler, LMGroupSampler
    from .io.serialization import load_policy, save_policy
    from .sb3 import GRPO
    from .loop.trainer import GRPOLoop

__version__ = "0.1.0"

# Public name -> the submodule (relative to this package) that defines it.
_SUBMODULE = {
    "outcome_advantages": ".math.advantages", "process_advantages": ".math.advantages",
    "stepwise_return_advantages": ".math.advantages", "compute_advantages": ".math.advantages",
    "RolloutBatch": ".math.batch",
    "LoopConfig": ".loop.config",
    "aggregate": ".math.objective", "clipped_surrogate": ".math.objective", "grpo_loss": ".math.objective",
    "k3_kl": ".math.objective", "probability_ratio": ".math.objective", "token_logprobs": ".math.objective",
    "CategoricalMLPPolicy": ".policies", "CausalLMPolicy": ".policies",
    "make_actor": ".policies.actor",
    "RewardScorer": ".scoring.rewards", "load_reward_fn": ".scoring.rewards",
    "EnvGroupSampler": ".sampling", "GroupSampler": ".sampling", "LMGroupSampler": ".sampling",
    "TextEnvGroupSampler": ".envs.text",
    "load_policy": ".io.serialization", "save_policy": ".io.serialization",
    "GRPOLoop": ".loop.trainer",
    "GRPO": ".sb3",
}

# The core's former names, which TRL's own classes also bear: a clear error rather than a mix-up.
_RENAMED = {"GRPOTrainer": "GRPOLoop", "GRPOConfig": "LoopConfig"}

__all__ = [
    "LoopConfig", "GRPOLoop", "RolloutBatch", "GroupSampler", "EnvGroupSampler", "CategoricalMLPPolicy",
    "CausalLMPolicy", "LMGroupSampler", "TextEnvGroupSampler", "RewardScorer", "load_reward_fn",
    "outcome_advantages", "process_advantages", "stepwise_return_advantages", "compute_advantages",
    "token_logprobs", "probability_ratio", "k3_kl", "clipped_surrogate", "aggregate", "grpo_loss",
    "save_policy", "load_policy", "GRPO",
]


def __getattr__(name: str) -> Any:
    module = _SUBMODULE.get(name)
    if name in _RENAMED:
        raise AttributeError(f"grpo_seq.{name} is now grpo_seq.{_RENAMED[name]}; TRL's interface is "
                             f"grpo_seq.trl.{name}")
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
