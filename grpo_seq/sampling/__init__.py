"""Group samplers: G outputs per prompt or per environment start state."""

from .base import GroupSampler
from .env import EnvGroupSampler, make_vector_env
from .lm import LMGroupSampler, completion_mask

__all__ = ["GroupSampler", "EnvGroupSampler", "LMGroupSampler", "completion_mask", "make_vector_env"]
