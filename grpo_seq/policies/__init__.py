"""How a model scores tokens: ``policy(batch) -> (logp_t, entropy_t)``."""

from .mlp import CategoricalMLPPolicy

__all__ = ["CategoricalMLPPolicy"]
