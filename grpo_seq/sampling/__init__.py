"""Group samplers: G outputs per prompt or per environment start state."""

from .base import GroupSampler
from .env import EnvGroupSampler, make_vector_env

__all__ = ["GroupSampler", "EnvGroupSampler", "make_vector_env"]
