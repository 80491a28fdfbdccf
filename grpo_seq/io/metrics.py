"""metrics.jsonl: one JSON line per step, appended and flushed so a killed run keeps its history."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["JsonlLogger"]


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else v  # json has no NaN; keep inf visible as Infinity
    return v


class JsonlLogger:
    """Appends one JSON object per line to ``path``; NaN is written as null."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")

    def log(self, row: dict[str, Any]) -> None:
        self._fh.write(json.dumps({k: _plain(v) for k, v in row.items()}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def truncate_after(self, step: int) -> None:
        """Drop the rows logged after ``step`` (a resumed run logs them again), and any line a
        kill cut short; the file is rewritten atomically."""
        from .serialization import atomic_write_text

        self._fh.close()
        kept = []
        for line in self.path.read_text().splitlines() if self.path.exists() else []:
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept.append(line)
            except ValueError:
                continue
        atomic_write_text(self.path, "".join(ln + "\n" for ln in kept))
        self._fh = open(self.path, "a", encoding="utf-8")
