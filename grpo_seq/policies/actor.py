"""Actors: a policy turned into a function from a batch of observations to a batch of actions.

Samplers, evaluation and recording step environments with an actor rather than with the
policy module itself, so a policy may offer a faster path for the per-step calls than its torch
forward (a numpy snapshot of its weights, see :meth:`CategoricalMLPPolicy.numpy_actor`).
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

__all__ = ["Actor", "NumpyActing", "make_actor"]

Actor = Callable[[np.ndarray], np.ndarray]
"""Observations ``(n, obs_dim)`` float32 -> actions ``(n,)`` int64."""


@runtime_checkable
class NumpyActing(Protocol):
    """A policy that can act from a numpy snapshot of its weights (rebuilt after every update)."""

    def numpy_actor(self, rng: np.random.Generator | None = None, greedy: bool = False) -> Actor: ...


def make_actor(
    policy: nn.Module,
    rng: np.random.Generator | None = None,
    generator: torch.Generator | None = None,
    greedy: bool = False,
) -> Actor:
    """The actor of ``policy`` as it is now: its numpy actor where it has one (drawing from
    ``rng``), else its torch ``act(obs, generator=, greedy=)`` (drawing from ``generator``).

    Build it again after the policy's weights change: a numpy actor holds a copy of them.
    """
    if isinstance(policy, NumpyActing) and getattr(policy, "numpy_acting", True):
        return policy.numpy_actor(rng, greedy=greedy)
    if not callable(getattr(policy, "act", None)):
        raise TypeError(f"{type(policy).__name__} cannot act in an environment: it has neither numpy_actor() nor act()")

    def act(obs: np.ndarray) -> np.ndarray:
        return policy.act(torch.as_tensor(obs, dtype=torch.float32), generator=generator, greedy=greedy).numpy()

    return act
