"""A user's per-step reward ``reward_function(state, action, next_state)``, called once per rollout.

The function gets every transition of a rollout in one call, as batched torch tensors
``state (B, obs_dim)``, ``action (B, 1)`` and ``next_state (B, obs_dim)``, and returns ``(B, 1)`` or
``(B,)`` rewards. It replaces the environment's reward for training only: the environment still
decides when an episode ends, and evaluation reports the environment's own return.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import Tensor

from ..errors import UsageError

__all__ = ["StepRewardFn", "apply_step_reward"]

StepRewardFn = Callable[[Tensor, Tensor, Tensor], Tensor]


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _describe(value: object) -> str:
    if isinstance(value, (Tensor, np.ndarray)):
        return f"a {type(value).__name__} shaped {tuple(value.shape)} of {value.dtype}"
    return f"{type(value).__name__} {value!r}"[:200]


def apply_step_reward(fn: StepRewardFn, states: np.ndarray, actions: np.ndarray, next_states: np.ndarray) -> np.ndarray:
    """``fn``'s rewards for ``B`` transitions as a float32 array ``(B,)``.

    Anything but ``B`` finite numbers shaped ``(B,)`` or ``(B, 1)``, or an exception inside ``fn``,
    is a :class:`UsageError` naming the function and what it returned.
    """
    B = len(states)
    s = torch.from_numpy(np.ascontiguousarray(states, dtype=np.float32))
    a = torch.from_numpy(np.ascontiguousarray(actions, dtype=np.int64).reshape(B, 1))
    s2 = torch.from_numpy(np.ascontiguousarray(next_states, dtype=np.float32))
    where = f"reward_function {_name(fn)}(state {tuple(s.shape)}, action {tuple(a.shape)}, next_state {tuple(s2.shape)})"
    try:
        out = fn(s, a, s2)
    except Exception as e:  # the user's code: say whose it is, keep the cause chained
        raise UsageError(f"{where} raised {type(e).__name__}: {e}") from e
    if isinstance(out, np.ndarray):
        out = torch.from_numpy(out)
    if not isinstance(out, Tensor) or tuple(out.shape) not in ((B,), (B, 1)):
        raise UsageError(f"{where} returned {_describe(out)}; it must return a tensor shaped ({B},) or ({B}, 1)")
    out = out.detach().reshape(B).float().cpu()
    bad = ~torch.isfinite(out)
    if bad.any():
        i = int(bad.nonzero()[0])
        raise UsageError(f"{where} returned a non-finite reward ({float(out[i])}) for transition {i} of {B}: "
                         f"state {s[i].tolist()}, action {int(a[i])}; rewards must be finite numbers")
    return out.numpy()
