"""How a model scores tokens: ``policy(batch) -> (logp_t, entropy_t)``."""

from .causal_lm import CausalLMPolicy
from .mlp import CategoricalMLPPolicy

__all__ = ["CategoricalMLPPolicy", "CausalLMPolicy"]
