"""SB3 VecEnv wrappers that change the observations, remade per env for the group sampler.

The sampler steps the envs underneath a user's ``VecEnv`` (each member of a group from the
group's start state), so a wrapper around the ``VecEnv`` never sees those steps. Where the wrapper
is a function of one env's observations alone, the same function wraps each env the sampler steps,
and the policy then learns on the observations the user's ``VecEnv`` hands ``predict``:

- ``VecFrameStack(venv, n_stack, channels_order)``: the last ``n_stack`` observations along the
  channel axis (the last for channel-last images and flat vectors, the first for channel-first),
  zeros before the episode's first, as SB3's ``StackedObservations`` does; a Dict's parts each so;
- ``VecTransposeImage``: an image ``(H, W, C)`` as ``(C, H, W)``.

Any other wrapper that changes the spaces is refused by name.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from ..errors import UsageError

__all__ = ["FrameStack", "TransposeImage", "per_env_wrappers"]


class _Stack:
    """One observation's last ``n_stack`` values along ``axis`` (0 or -1), zeros before the episode's first."""

    def __init__(self, space: gym.spaces.Box, n_stack: int, axis: int):
        self.axis, self.width = axis, space.shape[axis]
        self.space = gym.spaces.Box(low=np.repeat(space.low, n_stack, axis=axis),
                                    high=np.repeat(space.high, n_stack, axis=axis), dtype=space.dtype)
        self.stack = np.zeros(self.space.shape, dtype=space.dtype)

    def push(self, observation: np.ndarray) -> np.ndarray:
        self.stack = np.roll(self.stack, -self.width, axis=self.axis)
        if self.axis == 0:
            self.stack[-self.width:] = observation
        else:
            self.stack[..., -self.width:] = observation
        return self.stack.copy()


class FrameStack(gym.ObservationWrapper):
    """SB3's ``VecFrameStack`` for one env: the last ``n_stack`` observations concatenated along
    ``axis`` (0 or -1), the slots before the episode's first observation zero; over a Dict of
    ``Box`` parts, each part so along its own axis (``axis``: key -> axis)."""

    def __init__(self, env: gym.Env, n_stack: int, axis: int | dict[str, int]):
        super().__init__(env)
        space = env.observation_space
        parts = space.spaces if isinstance(space, gym.spaces.Dict) else {None: space}
        if not all(isinstance(part, gym.spaces.Box) for part in parts.values()):
            raise UsageError(f"GRPO: VecFrameStack over {space} is not supported; stack Box observations, or a Dict of them")
        self.stacks = {key: _Stack(part, n_stack, axis[key] if isinstance(axis, dict) else axis)
                       for key, part in parts.items()}
        self.observation_space = self.stacks[None].space if None in self.stacks else gym.spaces.Dict(
            {key: stack.space for key, stack in self.stacks.items()})

    def reset(self, **kwargs: Any):
        for stack in self.stacks.values():
            stack.stack[...] = 0
        return super().reset(**kwargs)

    def observation(self, observation: Any) -> Any:
        if None in self.stacks:
            return self.stacks[None].push(observation)
        return {key: stack.push(observation[key]) for key, stack in self.stacks.items()}


class TransposeImage(gym.ObservationWrapper):
    """SB3's ``VecTransposeImage`` for one env: an ``(H, W, C)`` image as ``(C, H, W)``."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(low=np.transpose(space.low, (2, 0, 1)),
                                                high=np.transpose(space.high, (2, 0, 1)), dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.transpose(observation, (2, 0, 1))


def _frame_stack(wrapper: Any) -> Callable[[gym.Env], gym.Env]:
    stacked = wrapper.stacked_obs  # SB3's StackedObservations: how it stacks one env's observations
    parts = getattr(stacked, "sub_stacked_observations", None)  # a Dict's: one per key
    if isinstance(parts, dict):
        axes = {key: 0 if part.channels_first else -1 for key, part in parts.items()}
        n_stack = next(iter(parts.values())).n_stack
        return lambda env: FrameStack(env, n_stack, axes)
    axis = 0 if stacked.channels_first else -1
    return lambda env: FrameStack(env, stacked.n_stack, axis)


PER_ENV = {"VecFrameStack": _frame_stack, "VecTransposeImage": lambda wrapper: TransposeImage}


def per_env_wrappers(vec_env: Any) -> list[Callable[[gym.Env], gym.Env]]:
    """The per-env equivalents of the space-changing wrappers around an SB3 ``VecEnv``, innermost
    first (``venv`` chain); a space-changing wrapper without one is refused by name."""
    found = []
    while hasattr(vec_env, "venv") and hasattr(vec_env, "step_async"):
        inner = vec_env.venv
        if (vec_env.observation_space, vec_env.action_space) != (inner.observation_space, inner.action_space):
            name = type(vec_env).__name__
            if name not in PER_ENV:
                raise UsageError(f"GRPO: {name} changes the env's spaces (observations {_shape(inner.observation_space)} "
                                 f"-> {_shape(vec_env.observation_space)}); GRPO steps the envs underneath it, so pass "
                                 "them without it")
            found.append(PER_ENV[name](vec_env))
        vec_env = inner
    return found[::-1]


def _shape(space: Any) -> str:
    return f"{type(space).__name__}{tuple(space.shape) if getattr(space, 'shape', None) is not None else ''}"
