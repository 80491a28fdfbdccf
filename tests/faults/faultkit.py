"""Helpers of the fault suite (imported by its tests and its conftest): tiny budgets, hashing a
run folder, the one error line."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

# CartPole with budgets small enough for a second or two a run.
TINY = ["--total_env_steps", "400", "--eval_every", "200", "--eval_episodes", "2", "--torch_threads", "1"]
# The GSM8K recipe without its process-wide changes (malloc, every core).
LM_QUIET = ["--torch_threads", "1", "--retain_freed_memory", "false", "--use_cpu", "true", "--max_steps", "1",
            "--max_completion_length", "4", "--num_groups", "1", "--num_generations", "2"]


def tree_hashes(folder: str | os.PathLike) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (relative path -> digest); {} when it does not exist."""
    folder = Path(folder)
    if not folder.exists():
        return {}
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def one_error_line(err: str) -> str:
    """The single ``error: ...`` line of ``err`` (asserting there is exactly one, and no traceback)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


class Result:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def __repr__(self) -> str:
        return f"Result(code={self.code}, out={self.out[-2000:]!r}, err={self.err[-2000:]!r})"



def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path
