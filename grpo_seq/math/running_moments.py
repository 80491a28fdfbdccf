"""A running per-dimension mean and variance, merged batch by batch (Chan, Golub and LeVeque 1979),
as Stable-Baselines3's ``VecNormalize`` keeps them for its observations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["RunningMoments"]


@dataclass
class RunningMoments:
    """The count ``n``, mean ``mu`` and sum of squared deviations ``M2`` of every row seen so far.

    Merging a batch ``B`` into what was seen, ``A`` (the parallel form, exact for any split):
    ``n = n_A + n_B``, ``delta = mu_B - mu_A``, ``mu = mu_A + delta n_B / n`` and
    ``M2 = M2_A + M2_B + delta^2 n_A n_B / n``; the variance is ``M2 / n`` (the population's, as
    ``VecNormalize``'s). Kept in float64: a long run's sums would lose float32's digits.
    """

    count: float = 0.0
    mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    m2: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def merge(self, count: float, mean: np.ndarray, m2: np.ndarray) -> None:
        """Take in a batch given by its own count, mean and ``M2``."""
        if count <= 0:
            return
        mean, m2 = np.asarray(mean, dtype=np.float64), np.asarray(m2, dtype=np.float64)
        if self.count == 0:
            self.count, self.mean, self.m2 = float(count), mean.copy(), m2.copy()
            return
        total = self.count + count
        delta = mean - self.mean
        self.mean = self.mean + delta * (count / total)
        self.m2 = self.m2 + m2 + delta ** 2 * (self.count * count / total)
        self.count = total

    @property
    def var(self) -> np.ndarray:
        return self.m2 / self.count if self.count else np.zeros_like(self.m2)

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count, "mean": self.mean.tolist(), "m2": self.m2.tolist()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RunningMoments:
        return cls(float(state["count"]), np.asarray(state["mean"], dtype=np.float64),
                   np.asarray(state["m2"], dtype=np.float64))
