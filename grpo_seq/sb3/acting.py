"""The Stable-Baselines3 class's ``predict``: actions from a numpy copy of the current weights."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import UsageError
from ..jobs.env import make_actor
from .policy import GRPOPolicy

__all__ = ["Acting"]


class Acting:
    """``predict`` for :class:`grpo_seq.sb3.model.GRPO` (its ``policy``, ``seed`` and ``_actors``,
    the actors of the current weights, emptied by each update)."""

    policy: Any
    seed: int
    _actors: dict[bool, Any]

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, Any]:
        """``(action, state)`` as SB3 returns them: one observation gives one action (shaped as the
        action space), a batch ``(n, ...)`` gives ``n``; ``state`` is passed back (no recurrence)."""
        if isinstance(self.policy, GRPOPolicy):
            return self.policy.predict(observation, state, episode_start, deterministic)
        obs = np.asarray(observation, dtype=np.float32)
        dim = int(self.policy.init_kwargs["obs_dim"]) if hasattr(self.policy, "init_kwargs") else obs.shape[-1]
        if obs.shape == (dim,):
            return np.asarray(self._actor(deterministic)(obs[None])[0], dtype=np.int64), state
        if obs.ndim == 2 and obs.shape[1] == dim:
            return np.asarray(self._actor(deterministic)(obs), dtype=np.int64), state
        raise UsageError(f"GRPO.predict: an observation shaped ({dim},) or a batch (n, {dim}), got {obs.shape}")

    def _actor(self, greedy: bool) -> Any:
        """The numpy actor of the current weights, built once per update (greedy or sampling)."""
        if greedy not in self._actors:
            rng = np.random.default_rng(self.seed + 7 + len(self._actors))
            self._actors[greedy] = make_actor(self.policy, rng, greedy=greedy)
        return self._actors[greedy]
