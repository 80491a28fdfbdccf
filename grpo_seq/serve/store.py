"""The service's state on disk, every file written atomically, so that a restart finds it again.

    <store>/jobs/<id>/job.json       the job's record (state, spec, exit status, error line)
    <store>/jobs/<id>/spec.json      the job spec its process runs
    <store>/jobs/<id>/progress.json  written by the job's process: progress and latest metrics
    <store>/jobs/<id>/log.txt        the job process's output
    <store>/jobs/<id>/run/           its run folder (config.json, metrics.jsonl, checkpoints/, policy/ ...)
    <store>/models/<name>.json       a finished job's model: its kind, folder and summary
    <store>/data/                    datasets that language-model and agent jobs may name
    <store>/agents/                  the agents (module:function) agent jobs may name, put there by its owner
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..io.serialization import atomic_write_text

__all__ = ["Store", "AGENTS", "MODEL_NAME", "check_model_name"]

AGENTS = "agents"  # the folder of the store whose modules agent jobs import

MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_model_name(name: Any) -> str:
    """``name`` if it is a plain name (a letter or digit, then up to 63 of letters, digits, ``_.-``;
    no ``..``), else ValueError: a model name becomes a file name and must not be a path."""
    if not isinstance(name, str) or not MODEL_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"model_name {name!r}: give a plain name of 1 to 64 letters, digits, '_', '.' or '-' "
                         "starting with a letter or digit (not a path)")
    return name


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Store:
    """The folders of one service's state."""

    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().resolve()
        for sub in ("jobs", "models", "data"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def job_dir(self, job_id: str) -> Path:
        return self.root / "jobs" / job_id

    def run_dir(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "run"

    def read_job(self, job_id: str) -> dict[str, Any] | None:
        return _read_json(self.job_dir(job_id) / "job.json")

    def write_job(self, record: dict[str, Any]) -> None:
        atomic_write_text(self.job_dir(record["id"]) / "job.json", json.dumps(record, indent=2))

    def jobs(self) -> list[dict[str, Any]]:
        """Every job's record, oldest first."""
        found = (self.read_job(p.name) for p in (self.root / "jobs").iterdir() if p.is_dir())
        return sorted((r for r in found if r), key=lambda r: r.get("created", 0))

    def progress(self, job_id: str) -> dict[str, Any] | None:
        return _read_json(self.job_dir(job_id) / "progress.json")

    def model(self, name: str) -> dict[str, Any] | None:
        return _read_json(self.root / "models" / f"{name}.json") if MODEL_NAME.fullmatch(name) else None

    def model_path(self, name: str) -> Path:
        return self.root / "models" / f"{name}.json"

    def write_model(self, record: dict[str, Any]) -> None:
        atomic_write_text(self.model_path(record["name"]), json.dumps(record, indent=2))

    def models(self) -> list[dict[str, Any]]:
        found = (_read_json(p) for p in sorted((self.root / "models").glob("*.json")))
        return [m for m in found if m]

    def inside(self, relative: str, sub: str = "") -> Path | None:
        """``relative`` resolved under the store (``sub`` of it), or None when it leaves it."""
        base = (self.root / sub).resolve()
        path = (base / relative).resolve()
        return path if path == base or base in path.parents else None
