"""SB3's schedules ``f(progress_remaining) -> float`` as data, so that a save holds them without pickle.

A schedule given as a function is code; Stable-Baselines3 pickles it into the zip. Here it is
saved as its values at :data:`POINTS` evenly spaced points of ``progress_remaining`` in [0, 1]
and read back as their linear interpolation: exact for a constant or linear schedule, within
``h^2 max|f''| / 8`` (``h = 1 / (POINTS - 1)``) of a smooth one, and a step of a step schedule
spread over one ``h``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["FloatSchedule", "TabulatedSchedule", "tabulate", "POINTS"]

POINTS = 1001
_GRID = np.linspace(0.0, 1.0, POINTS)


def tabulate(fn: Callable[[float], Any]) -> dict[str, Any]:
    """``fn`` at the grid's points, as JSON."""
    return {":type:": "<class 'TabulatedSchedule'>", ":table:": [float(fn(float(p))) for p in _GRID]}


class TabulatedSchedule:
    """A schedule read back from :func:`tabulate`'s values: their linear interpolation."""

    def __init__(self, table: list[float]):
        if len(table) != POINTS:
            raise ValueError(f"a tabulated schedule holds {POINTS} values, got {len(table)}")
        self.table = np.asarray(table, dtype=np.float64)

    def __call__(self, progress_remaining: float) -> float:
        return float(np.interp(float(progress_remaining), _GRID, self.table))

    def to_json(self) -> dict[str, Any]:
        return {":type:": "<class 'TabulatedSchedule'>", ":table:": self.table.tolist()}


class FloatSchedule:
    """SB3's ``FloatSchedule``: ``f(progress_remaining) -> float`` of a constant, a schedule, or
    our linear decay from ``value`` to 0."""

    def __init__(self, value: Any, linear: bool = False):
        self.value, self.linear = value, linear

    def to_json(self) -> dict[str, Any]:
        """The schedule as JSON (what a save records): a function as its table of values."""
        if callable(self.value):
            return tabulate(self)
        return {":type:": "<class 'FloatSchedule'>", "value": float(self.value), "linear": self.linear}

    def __call__(self, progress_remaining: float) -> float:
        if callable(self.value):
            return float(self.value(progress_remaining))
        return float(self.value) * (float(progress_remaining) if self.linear else 1.0)
