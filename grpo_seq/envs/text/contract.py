"""What a text environment is, how one is made, and the checks on what it returns.

A text environment is a gymnasium environment whose observations and actions are text
(``gymnasium.spaces.Text``)::

    reset(seed=None, options=None) -> (prompt: str, info: dict)
    step(reply: str) -> (observation: str, reward: float, terminated: bool, truncated: bool, info: dict)

``prompt`` opens the conversation (the first user message, or a list of chat messages to open
with), ``reply`` is the model's answer as
decoded text, ``observation`` the environment's answer (the next user message) and ``reward``
that turn's reward. An ``info`` key ``success`` (a bool), where the environment reports one, is
counted into the run's success rate.

An environment is named by its gymnasium id (``MyGame-v0`` once registered, ``mypkg.games:MyGame-v0``
to import ``mypkg.games`` first, which registers it) or by ``textarena:GAME`` for a
single-player TextArena game (:mod:`.textarena`).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym

from ...errors import UsageError
from ...sampling.env import make_env

__all__ = ["TEXTARENA", "make_text_env", "text_env_name", "check_text_spaces", "checked_reset", "checked_step"]

TEXTARENA = "textarena:"


def make_text_env(env_id: str, **kwargs: Any) -> gym.Env:
    """The text environment ``env_id`` names (see the module's docstring), made with ``kwargs``.

    An id gymnasium cannot make, a module that does not import, or spaces other than ``Text`` are
    a :class:`UsageError` naming the id."""
    if env_id.startswith(TEXTARENA):
        from .textarena import TextArenaEnv

        env: gym.Env = TextArenaEnv(env_id[len(TEXTARENA):], **kwargs)
    else:
        try:
            # gymnasium's passive checker warns on every observation outside Text's default charset
            env = make_env(env_id, tokens=False, disable_env_checker=True, **kwargs)
        except ImportError as e:
            raise UsageError(f"--env_id {env_id}: {e}") from None
    check_text_spaces(env_id, env)
    return env


def text_env_name(env: gym.Env, env_id: str | None = None) -> str:
    """The name errors give an environment: its id, else its class's name."""
    if env_id:
        return env_id
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None else type(getattr(env, "unwrapped", env)).__name__


def check_text_spaces(name: str, env: gym.Env) -> None:
    """Refuse an env that declares observation or action spaces other than ``gymnasium.spaces.Text``
    (an env that declares none is taken at its word)."""
    for what in ("observation_space", "action_space"):
        space = getattr(env, what, None)
        if space is not None and not isinstance(space, gym.spaces.Text):
            raise UsageError(f"{name}: its {what} is {space}, not gymnasium.spaces.Text; a text environment "
                             "takes replies and gives observations as strings (train-env trains vector envs)")


def checked_reset(env: gym.Env, name: str, seed: int) -> tuple[str | list[dict], dict]:
    """``env.reset(seed=seed)``; an exception or a prompt that is neither a string nor a list of chat
    messages (dicts with ``role`` and ``content``) is a :class:`UsageError` naming the env."""
    try:
        out = env.reset(seed=seed)
    except Exception as e:  # the user's code: say whose it is, keep the cause chained
        raise UsageError(f"{name} raised {type(e).__name__} at reset (seed {seed}): {e}") from e
    if not (isinstance(out, tuple) and len(out) == 2):
        raise UsageError(f"{name}.reset returned {_describe(out)}; a text environment returns (prompt, info)")
    prompt, info = out
    if _is_chat(prompt):  # a conversation to open with (chat messages), as a prompt column may hold
        return prompt, dict(info or {})
    if not isinstance(prompt, str):
        raise UsageError(f"{name}.reset returned a prompt of type {type(prompt).__name__} ({_describe(prompt)}); "
                         "a text environment's observations are strings")
    return prompt, dict(info or {})


def checked_step(env: gym.Env, name: str, turn: int, reply: str) -> tuple[str, float, bool, bool, dict]:
    """``env.step(reply)`` at ``turn`` (1 for the first reply), checked: an exception, an observation
    that is not a string, a reward that is not a finite number (a string is not), an info that is
    not a dict, or ``info["messages"]`` that is not a list of chat messages is a
    :class:`UsageError` naming the env and the turn."""
    try:
        out = env.step(reply)
    except Exception as e:  # the user's code: say whose it is, keep the cause chained
        raise UsageError(f"{name} raised {type(e).__name__} at turn {turn} (reply {reply[:80]!r}): {e}") from e
    if not (isinstance(out, tuple) and len(out) == 5):
        raise UsageError(f"{name}.step returned {_describe(out)} at turn {turn}; a text environment returns "
                         "(observation, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = out
    if not isinstance(obs, str):
        raise UsageError(f"{name} returned an observation of type {type(obs).__name__} ({_describe(obs)}) at turn "
                         f"{turn}; a text environment's observations are strings")
    try:  # a number (numpy's, a 0-d tensor); not a string that reads as one
        value = math.nan if isinstance(reward, (str, bytes)) else float(reward)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value):
        raise UsageError(f"{name} returned the reward {_describe(reward)} at turn {turn}; rewards must be finite numbers")
    if not isinstance(info, dict):
        raise UsageError(f"{name} returned the info {_describe(info)} at turn {turn}; a step's info is a dict "
                         "(gymnasium's contract; {} for none)")
    if "messages" in info and not _is_chat(info["messages"]):
        raise UsageError(f"{name} returned info['messages'] = {_describe(info['messages'])} at turn {turn}; give a list "
                         "of chat messages ({'role': ..., 'content': ...})")
    return obs, value, bool(terminated), bool(truncated), dict(info)


def _describe(value: object) -> str:
    return repr(value)[:120]


def _is_chat(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)
