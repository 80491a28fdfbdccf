"""Experiment trackers (TensorBoard, W&B, ...) through accelerate, beside metrics.jsonl."""

from __future__ import annotations

import os
from typing import Any, Sequence

__all__ = ["tracker_kwargs", "tracker_config"]

# Tracker name -> the package that provides it (what to pip install).
_PACKAGES = {
    "tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio", "aim": "aim", "comet_ml": "comet_ml",
    "mlflow": "mlflow", "clearml": "clearml", "dvclive": "dvclive", "swanlab": "swanlab",
}


def tracker_kwargs(report_to: Sequence[Any], output_dir: str | os.PathLike | None) -> dict[str, Any]:
    """``Accelerator`` keyword arguments for ``--report_to`` (empty for none).

    Names are accelerate's trackers; objects are ``accelerate.tracking.GeneralTracker``s. A named
    tracker whose package is missing is an error that says what to install (accelerate would
    silently log nowhere). Local trackers (TensorBoard, ...) write under ``output_dir``.
    """
    from accelerate.tracking import get_available_trackers

    wanted = [r for r in report_to if not (isinstance(r, str) and r.lower() == "none")]
    if not wanted:
        return {}
    available = {str(t) for t in get_available_trackers()}
    for name in wanted:
        if not isinstance(name, str) or name == "all":
            continue
        if name not in _PACKAGES:
            raise ValueError(f"--report_to {name}: unknown tracker; choose from {sorted(_PACKAGES)} (or none)")
        if name not in available:
            raise ValueError(f"--report_to {name}: the {_PACKAGES[name]} package is not installed "
                             f"(pip install {_PACKAGES[name]}), or drop it from --report_to")
    return {"log_with": wanted, "project_dir": str(output_dir) if output_dir else None}


def tracker_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config as trackers accept it: numbers, strings and booleans (lists and None as text)."""
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in config.items()}
