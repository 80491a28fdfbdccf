"""How a model scores tokens: ``policy(batch) -> (logp_t, entropy_t)``."""

from .actor import Actor, make_actor
from .causal_lm import CausalLMPolicy
from .mlp import CategoricalMLPPolicy

__all__ = ["Actor", "CategoricalMLPPolicy", "CausalLMPolicy", "make_actor"]
