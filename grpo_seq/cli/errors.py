"""How the command line ends a program: :func:`cli_errors` is what every entry point runs inside: bad usage ends as one ``error: ...``
line with exit status 2, a full disk (or a file over the process's size limit) as one line with
the resume command, a run stopped by NaN as one line with status 1; anything else is a bug and
keeps its traceback."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from ..errors import NonFiniteError, UsageError
from ..jobs.callbacks import JobCallbacks

__all__ = ["cli_errors", "note_run_dir", "NoteRunDir", "exit_with", "one_line"]

_run_dir: Path | None = None


def note_run_dir(path: str | os.PathLike | None) -> None:
    """Tell :func:`cli_errors` this program's run folder, so a full disk can print the resume command."""
    global _run_dir
    _run_dir = Path(path) if path is not None else None


def _no_space_message(e: OSError) -> str:
    """One line: where the disk is full and, when the run folder holds a checkpoint, how to resume."""
    from ..io.disk import mount_point

    where = _run_dir if _run_dir is not None else Path(e.filename) if e.filename else None
    if where is None:
        return "error: no space left on device; free some space and run again"
    msg = f"error: no space left on {mount_point(where)} (writing to {where})"
    if e.strerror and e.strerror != os.strerror(errno.ENOSPC):  # the free-space check says what was short
        msg += f": {e.strerror}"
    return msg + _way_out("free some space")


def _too_large_message(e: OSError) -> str:
    """One line: the file over this process's size limit (``ulimit -f``), the limit, how to resume."""
    from ..io.disk import file_size_limit, format_bytes

    limit = file_size_limit()
    said = f"{limit} bytes ({format_bytes(limit)})" if limit is not None else "its limit"
    name = e.filename or (f"a file in {_run_dir}" if _run_dir is not None else "a file")
    return (f"error: {name}: file too large: this process may write files of at most {said} "
            f"(RLIMIT_FSIZE, ulimit -f)" + _way_out("raise the limit (ulimit -f unlimited)"))


def _way_out(fix: str) -> str:
    """The end of a disk error's line: the intact checkpoint and the resume command, or run again."""
    from ..jobs.folder import checkpoints, resume_command

    found = checkpoints(_run_dir) if _run_dir is not None else []
    if found:
        return (f"; the last complete checkpoint, {found[-1]}, is intact. {fix[0].upper() + fix[1:]}, then "
                f"resume with: {resume_command(_run_dir)}")
    return f"; {fix} and run again"


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Run an entry point's body: a :class:`UsageError` prints ``error: <message>`` and exits 2;
    ``OSError(ENOSPC)`` prints "no space left on <mount point>" and the resume command, exit 1
    (``OSError(EFBIG)``, a file over ``ulimit -f``: the file, the limit and the resume command);
    :class:`NonFiniteError` (raised after the recipe checkpointed the last finite weights)
    prints its message, exit 1. Any other exception propagates with its traceback."""
    note_run_dir(None)
    try:
        try:
            yield
        except BaseException:
            _release_own_lock()
            raise
    except UsageError as e:
        exit_with(f"error: {one_line(e)}", 2)
    except NonFiniteError as e:
        exit_with(f"error: {one_line(e)}", 1)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            exit_with(_no_space_message(e), 1)
        if e.errno == errno.EFBIG:
            exit_with(_too_large_message(e), 1)
        raise


def _release_own_lock() -> None:
    """Free the run folder when this process's run ends on an error (a refused resume, NaN, a full
    disk), so the corrected command starts at once rather than finding a lock to take over."""
    if _run_dir is not None:
        from ..io.run_dir import RunLock

        lock = RunLock(_run_dir)
        lock.held = True  # release() removes the file only when it holds this process's pid
        lock.release()


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


class NoteRunDir(JobCallbacks):
    """Tells :func:`cli_errors` the job's run folder as soon as it is known."""

    def on_run_dir(self, path: Path) -> None:
        note_run_dir(path)


def exit_with(line: str, code: int) -> None:
    """Print ``line`` to stderr and exit with ``code``. Under a launch of several processes only one
    prints (:func:`_first_to_say`): each meets the same bad input (or the same full disk), and says
    the same line."""
    if _first_to_say():
        print(line, file=sys.stderr, flush=True)
    raise SystemExit(code)


def _first_to_say() -> bool:
    """Whether this process is the first of its launch to stop with an error line. Not rank 0's
    privilege: the launcher stops the other processes as soon as one exits, so rank 0 may be
    stopped before it gets to say it. The processes of one launch share their launcher (the parent
    process) and port; the first to create the claim file says the line (a file of no bytes left
    in the temporary folder)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return True
    claim = Path(tempfile.gettempdir()) / f"grpo-seq-error-said-{os.getppid()}-{os.environ.get('MASTER_PORT', '')}"
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    except OSError:  # no temporary folder to claim in: rank 0 speaks
        return os.environ.get("RANK", "0") == "0"
    return True
