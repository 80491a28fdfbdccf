"""A count-based exploration bonus that breaks ties between the members of a group.

Where every episode of a group ends alike (all time out at the same return, as in Acrobot or
MountainCar before the first success), GRPO's advantages are exactly 0 and nothing is learned.
This bonus adds to each step's reward ``scale / sqrt(n)``, where ``n`` counts the visits, over
the whole run, to the grid cell of the step's next observation. A member that reaches rarer
states then earns a little more than its peers, and the group is no longer flat.

Because advantages are divided by the group's standard deviation, the bonus's size hardly
matters where it is the only difference (any difference becomes a unit-sized advantage), and a
small ``scale`` keeps it negligible where the environment's own rewards differ: it decides only
ties. The cells are ``2 / bins`` of the policy's observation scale wide in each dimension, so
the grid follows the units the policy sees.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

__all__ = ["NoveltyBonus"]


class NoveltyBonus:
    """``bonus(s') = scale / sqrt(n(cell(s')))``, the counts kept over the whole run.

    Args:
        scale: the bonus of a first visit; small (e.g. 0.01), so that it only breaks ties.
        obs_scale: per-dimension observation scale (the policy's ``obs_scale``; 1s for none). None
            (a policy over images, whose pixels have no per-dimension units): each distinct
            observation is its own cell, an image's digest counted in place of the image.
        bins: cells per ``[-obs_scale, obs_scale]`` span of each dimension.
    """

    def __init__(self, scale: float, obs_scale: Sequence[float] | None, bins: int = 20):
        if not scale > 0 or bins < 1:
            raise ValueError(f"NoveltyBonus needs scale > 0 and bins >= 1, got scale={scale}, bins={bins}")
        self.scale, self.bins = float(scale), int(bins)
        self.cell = None if obs_scale is None else np.asarray(obs_scale, dtype=np.float64) * 2.0 / bins
        self.counts: dict[bytes, int] = {}

    def _keys(self, obs: np.ndarray) -> list[bytes]:
        """Each observation's cell, or with no units (images) a digest of the observation itself."""
        if self.cell is None:
            return [hashlib.blake2b(np.ascontiguousarray(row).tobytes(), digest_size=16).digest() for row in obs]
        return [row.tobytes() for row in np.floor(obs / self.cell).astype(np.int64)]

    def __call__(self, next_obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Bonuses ``(T, n)`` for next observations ``(T, n, obs_dim)``; only steps where ``mask``
        is True are counted and paid. The rollout's visits are counted first, so two members
        reaching the same new cell in one rollout share its count."""
        keys = self._keys(next_obs[mask])
        for k in keys:
            self.counts[k] = self.counts.get(k, 0) + 1
        out = np.zeros(mask.shape, dtype=np.float32)
        out[mask] = self.scale / np.sqrt(np.fromiter((self.counts[k] for k in keys), dtype=np.float64, count=len(keys)))
        return out

    def state_dict(self) -> dict[str, Any]:
        """The counts, JSON-able (cells as lists of ints, digests as hex), for checkpoints."""
        if self.cell is None:
            return {"counts": [[k.hex(), n] for k, n in self.counts.items()]}
        dim = len(self.cell)
        return {"counts": [[*np.frombuffer(k, dtype=np.int64, count=dim).tolist(), n] for k, n in self.counts.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counts = {_saved_key(row): int(row[-1]) for row in state["counts"]}


def _saved_key(row: list) -> bytes:
    """A count's key as :meth:`NoveltyBonus.state_dict` saved it: a digest's hex, or a cell's ints."""
    return bytes.fromhex(row[0]) if isinstance(row[0], str) else np.asarray(row[:-1], dtype=np.int64).tobytes()
