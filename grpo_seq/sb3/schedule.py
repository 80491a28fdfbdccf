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

__all__ = ["FloatSchedule", "TabulatedSchedule", "tabulate", "POINTS", "clip_schedule", "schedule_to_json",
           "schedule_from_json"]

POINTS = 1001
_GRID = np.linspace(0.0, 1.0, POINTS)


def tabulate(fn: Callable[[float], Any]) -> dict[str, Any]:
    """``fn`` at the grid's points, as JSON, with its name (a lambda's is ``<lambda>``)."""
    return {":type:": "<class 'TabulatedSchedule'>", ":table:": [float(fn(float(p))) for p in _GRID],
            "name": getattr(fn, "__name__", None)}


class TabulatedSchedule:
    """A schedule read back from :func:`tabulate`'s values: their linear interpolation."""

    def __init__(self, table: list[float], name: str | None = None):
        if len(table) != POINTS:
            raise ValueError(f"a tabulated schedule holds {POINTS} values, got {len(table)}")
        self.table = np.asarray(table, dtype=np.float64)
        if name is not None:  # the function it was, by name, as SB3's load gives it back
            self.__name__ = name

    def __call__(self, progress_remaining: float) -> float:
        return float(np.interp(float(progress_remaining), _GRID, self.table))

    def to_json(self) -> dict[str, Any]:
        return {":type:": "<class 'TabulatedSchedule'>", ":table:": self.table.tolist(),
                "name": getattr(self, "__name__", None)}


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


def _sb3_classes() -> tuple[type, type] | None:
    try:
        from stable_baselines3.common.utils import ConstantSchedule, FloatSchedule as SB3FloatSchedule
    except ImportError:
        return None
    return SB3FloatSchedule, ConstantSchedule


def clip_schedule(value: Any) -> Any:
    """``clip_range`` as SB3's PPO holds it: Stable-Baselines3's own ``FloatSchedule`` (of a
    ``ConstantSchedule`` for a number) where SB3 is installed, else :class:`FloatSchedule`. A
    schedule object already made is kept."""
    classes = _sb3_classes()
    if classes is None:
        return value if isinstance(value, FloatSchedule) else FloatSchedule(value)
    return value if isinstance(value, classes[0]) else classes[0](value)


def schedule_to_json(value: Any) -> dict[str, Any] | None:
    """SB3's ``FloatSchedule`` as data: a constant as its number (read back as the same classes,
    portably), a function as its table of values; None for anything else."""
    inner = getattr(value, "value_schedule", None)
    if inner is None or type(value).__name__ != "FloatSchedule":
        return None
    if type(inner).__name__ == "ConstantSchedule":
        return {":type:": "<class 'FloatSchedule'>", "constant": float(inner.val)}
    return {**tabulate(inner), "float_schedule": True}


def schedule_from_json(data: dict[str, Any]) -> Any:
    """What :func:`schedule_to_json` or :func:`tabulate` wrote, as the objects it was made from."""
    if "constant" in data:
        return clip_schedule(float(data["constant"]))
    table = TabulatedSchedule(data[":table:"], data.get("name"))
    return clip_schedule(table) if data.get("float_schedule") else table
