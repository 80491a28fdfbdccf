"""How much disk a run folder takes: hard-linked files (the final model shares the last
checkpoint's weight files) are counted once, by inode, as ``du`` does. And whether a write can
succeed before it starts: room on the filesystem (:func:`check_free_space`), the process's
file-size limit (:func:`file_size_limit`), an output folder that can be created
(:func:`check_output_dir`)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from ..errors import UsageError

__all__ = ["disk_use", "format_bytes", "disk_use_line", "check_free_space", "file_size_limit", "check_output_dir",
           "nearest_existing", "mount_point"]


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


def nearest_existing(path: str | os.PathLike) -> Path:
    """``path`` itself, or its nearest parent that exists: the folder a write there lands in first."""
    path = Path(path).expanduser().absolute()
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def check_free_space(target: str | os.PathLike, needed: int, what: str) -> None:
    """Raise ``OSError(ENOSPC)`` naming ``target`` before writing ``what`` (about ``needed`` bytes,
    a lower bound) when its filesystem has less room: a checkpoint that cannot fit is not started,
    so nothing is half-written and the error is the one a full disk gives (the resume command)."""
    free = shutil.disk_usage(nearest_existing(target)).free
    if needed > free:
        raise OSError(errno.ENOSPC, f"{what} needs at least {format_bytes(needed)}, {format_bytes(free)} are free",
                      str(target))


def file_size_limit() -> int | None:
    """This process's limit on the size of a file it writes (``RLIMIT_FSIZE``, ``ulimit -f``), in
    bytes; None when unlimited or unknown. Python ignores SIGXFSZ, so a write past it fails with EFBIG."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def check_output_dir(path: str | os.PathLike, option: str = "--output_dir") -> None:
    """Refuse, as a :class:`UsageError` naming ``option`` and the path, an output folder that
    cannot be made: it (or a parent) is a file, or the folder it would be made in is read-only.
    Checked before a run writes anything, so a refused run creates nothing."""
    path = Path(path).expanduser()
    found = nearest_existing(path)
    if not found.is_dir():
        what = "is a file" if found == path.absolute() else f"would be inside {found}, which is a file"
        raise UsageError(f"{option} {path}: {what}, not a folder; give a folder (new or existing) for the run")
    if not os.access(found, os.W_OK | os.X_OK):
        where = "the folder is" if found == path.absolute() else f"{found}, where it would be made, is"
        raise UsageError(f"{option} {path}: {where} read-only for this user; give a folder you can write to")


def mount_point(path: str | os.PathLike) -> Path:
    """The mount point of the filesystem holding ``path`` (or its nearest existing parent)."""
    path = nearest_existing(Path(path).resolve())
    dev = path.stat().st_dev
    while path != path.parent and path.parent.stat().st_dev == dev:
        path = path.parent
    return path
