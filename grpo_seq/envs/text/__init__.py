"""Text environments: gymnasium envs whose observations and actions are text, played by a
language model over several turns.

- :mod:`.contract`: what a text environment is, how one is made by id (``module:Env-v0``,
  ``textarena:GAME``), and the checks on what it returns.
- :mod:`.chat`: a conversation as tokens through the model's chat template (the replies' tokens
  trained, the environment's and the template's not).
- :mod:`.sampler`: :class:`TextEnvGroupSampler`, G episodes per start state, one generate call
  per turn for every episode still playing.
- :mod:`.evaluation`: greedy episodes on held-out seeds (success rate, return, turns, reply tokens).
- :mod:`.textarena`: single-player TextArena games as text environments (extra ``textarena``).
- :mod:`.tools`: tool calling (TRL's ``tools`` and ``environment_factory``) as a text environment.
"""

from .chat import ChatFormat
from .contract import checked_reset, checked_step, make_text_env, text_env_name
from .evaluation import HELD_OUT_SEED, evaluate_text_env
from .sampler import TextEnvGroupSampler
from .tools import ToolEnv, ToolEnvSampler

__all__ = ["ChatFormat", "TextEnvGroupSampler", "checked_reset", "checked_step", "make_text_env", "text_env_name",
           "evaluate_text_env", "HELD_OUT_SEED", "ToolEnv", "ToolEnvSampler"]
