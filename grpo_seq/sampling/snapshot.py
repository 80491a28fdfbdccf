"""Copies of an environment at its current state, to step alternatives from that state for real.

Two ways, chosen once per environment:

- CartPole (``gymnasium``'s ``CartPoleEnv`` under only the wrappers ``gym.make`` adds): the
  physics state is four numbers, copied into bare ``CartPoleEnv`` objects made once (a few
  microseconds, where a deep copy of the wrapped env costs ~200).
- Any other env: ``copy.deepcopy`` of the whole wrapped env, wrappers and time limit included.
  An env holding something that cannot be copied (a simulator handle, an open window, a
  socket) is refused with a :class:`UsageError` naming it.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np

from ..errors import UsageError

__all__ = ["Snapshotter", "clone_env", "env_name"]

# Wrappers gym.make adds (and Stable-Baselines3's Monitor, which only records): none changes
# what an observation or a reward is, so a bare env stepped from the copied state is the same.
_PLAIN_WRAPPERS = ("TimeLimit", "OrderEnforcing", "PassiveEnvChecker", "Monitor")


def env_name(env: gym.Env) -> str:
    """The env's id where it has one, else its class name (for messages)."""
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None else type(env.unwrapped).__name__


def clone_env(env: gym.Env, purpose: str, remedy: str) -> gym.Env:
    """``copy.deepcopy(env)``, wrappers and time limit included; an env that cannot be copied is a
    :class:`UsageError` naming it, what the copy was for (``purpose``) and the way out (``remedy``)."""
    try:
        return copy.deepcopy(env)
    except Exception as e:  # whatever the env holds: name the env, not the object deep inside it
        raise UsageError(f"{env_name(env)} cannot be cloned to {purpose} (copy.deepcopy failed: {type(e).__name__}: "
                         f"{e}); {remedy}, or make the env deep-copyable") from e


def _wrapper_names(env: gym.Env) -> list[str]:
    names = []
    while isinstance(env, gym.Wrapper):
        names.append(type(env).__name__)
        env = env.env
    return names


class Snapshotter:
    """``copies(env, n)``: ``n`` environments standing where ``env`` stands now, to be stepped."""

    def __init__(self, env: gym.Env):
        from gymnasium.envs.classic_control.cartpole import CartPoleEnv

        self.name = env_name(env)
        self._cartpole = type(env.unwrapped) is CartPoleEnv and set(_wrapper_names(env)) <= set(_PLAIN_WRAPPERS)
        self._bare: list[gym.Env] = []

    def copies(self, env: gym.Env, n: int) -> list[gym.Env]:
        if self._cartpole:
            return self._cartpole_copies(env, n)
        return [clone_env(env, "step alternatives from a state", "use group_mode='episodes'") for _ in range(n)]

    def _cartpole_copies(self, env: gym.Env, n: int) -> list[gym.Env]:
        src = env.unwrapped
        while len(self._bare) < n:
            bare = copy.deepcopy(src)  # same parameters (gravity, masses, thresholds) as the source
            self._bare.append(bare)
        for bare in self._bare[:n]:
            bare.state = np.array(src.state, dtype=np.float64)
            bare.steps_beyond_terminated = None
        return self._bare[:n]
