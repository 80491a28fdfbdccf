"""How much disk a run folder takes: hard-linked files (the final model shares the last
checkpoint's weight files) are counted once, by inode, as ``du`` does."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["disk_use", "format_bytes", "disk_use_line"]


def disk_use(folder: str | Path) -> dict[str, int]:
    """Bytes under each top-level entry of ``folder`` (files' sizes), each inode counted once:
    by the first entry, in sorted order, that holds it. ``"total"`` is their sum."""
    seen: set[tuple[int, int]] = set()
    use: dict[str, int] = {}
    root = Path(folder)
    for entry in sorted(root.iterdir()) if root.is_dir() else ():
        size = 0
        paths = [entry] if not entry.is_dir() else [Path(d) / f for d, _, fs in os.walk(entry) for f in fs]
        for p in paths:
            st = p.lstat()
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                size += st.st_size
        use[entry.name] = size
    use["total"] = sum(use.values())
    return use


def format_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KB`` (powers of 1000, as disk sizes are quoted)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def disk_use_line(folder: str | Path) -> str:
    """One line for the end of a run: the total and its largest parts (hard links counted once)."""
    use = disk_use(folder)
    total = use.pop("total")
    parts = ", ".join(f"{name} {format_bytes(size)}" for name, size in sorted(use.items(), key=lambda kv: -kv[1])
                      if size >= total / 100)
    line = f"disk: {folder} holds {format_bytes(total)} ({parts}; files shared by hard links counted once)"
    adam = sum(p.stat().st_size for p in Path(folder).glob("checkpoints/*/optimizer.pt"))
    if adam >= total / 10:
        line += (f"; {format_bytes(adam)} of it is the optimizer's state, which --save_optimizer false leaves out "
                 "(an exact resume then starts Adam afresh)")
    return line
