"""Stopping on SIGTERM or SIGINT at a step boundary, so the run can checkpoint before it exits."""

from __future__ import annotations

import contextlib
import errno
import shlex
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator

import torch

from ..errors import DivergedError

__all__ = ["GracefulStop", "resume_command", "checkpoint_on_error", "any_process"]


class GracefulStop:
    """Within ``with GracefulStop() as stop:``, SIGTERM and SIGINT only set ``stop.requested``.

    The training loop checks :meth:`agreed` after each step, writes a checkpoint and exits with
    :attr:`exit_code` (128 + the signal number, the shell's convention). Pre-emptible machines
    send SIGTERM and wait a grace period before killing; one step plus a checkpoint must fit in
    it. A second SIGINT (Ctrl-C twice) interrupts at once, as usual.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or 0)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        if self.signum is None:  # say so at once: a language-model step can take a while
            print(f"{signal.Signals(signum).name} received: finishing the current step, then writing a checkpoint"
                  f"{' (Ctrl-C again stops at once)' if signum == signal.SIGINT else ''}", file=sys.stderr, flush=True)
        self.signum = self.signum or signum

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for s in self.SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def checkpoint_and_exit(self, trainer: Any, extra: Callable[[], dict] | None, run_dir: str | Path) -> None:
        """Write a checkpoint of the steps done, print how to resume (main process), and exit
        with :attr:`exit_code`; every process calls it."""
        path = trainer.save_checkpoint(extra)
        if trainer.accelerator.is_main_process:
            print(f"{self.signal_name} received: stopped after step {trainer.step_count}; checkpoint written to "
                  f"{path}.\nResume with: {resume_command(run_dir)}", flush=True)
        sys.exit(self.exit_code)

    def agreed(self, accelerator=None) -> bool:
        """Whether any process was asked to stop; all processes get the same answer (one tiny
        all-reduce per call when there are several), so they checkpoint and exit together."""
        return any_process(self.requested, accelerator)


def any_process(flag: bool, accelerator=None) -> bool:
    """Whether ``flag`` is True on any process; every process gets the same answer (one tiny
    all-reduce when there are several)."""
    if accelerator is None or accelerator.num_processes == 1:
        return flag
    t = torch.tensor([float(flag)], device=accelerator.device)
    return bool(accelerator.reduce(t, "sum").item() > 0)


def max_over_processes(value: float, accelerator=None) -> float:
    """The largest of ``value`` over the processes; every process gets the same answer (one tiny
    all-reduce when there are several)."""
    if accelerator is None or accelerator.num_processes == 1:
        return value
    t = torch.tensor([float(value)], device=accelerator.device)
    return float(accelerator.reduce(t, "max").item())


def resume_command(run_dir: str | Path, argv: list[str] | None = None) -> str:
    """This run's command line with ``--resume_from run_dir`` (any earlier one replaced)."""
    argv = list(sys.argv if argv is None else argv)
    kept, skip = [], False
    for a in argv[1:]:
        if skip:
            skip = False
            continue
        if a == "--resume_from":
            skip = True
            continue
        if a.startswith("--resume_from="):
            continue
        kept.append(a)
    # an installed command (sys.argv[0] "grpo-seq train-lm") runs as itself, a script through python
    head = argv[0].split() if argv[0].startswith("grpo-seq ") else ["python", argv[0]]
    return shlex.join([*head, *kept, "--resume_from", str(run_dir)])


@contextlib.contextmanager
def checkpoint_on_error(trainer: Any, extra: Callable[[], dict] | None, run_dir: str | Path) -> Iterator[None]:
    """On an exception in the block (a reward function that raises at step 500, a full disk, a
    bad batch), checkpoint the steps completed so far before the error propagates, and say how
    to resume once the cause is fixed. A failed step never reaches the optimizer, so the
    checkpoint is consistent. Single-process only: with several processes the others would
    wait for the failed one forever (the launcher stops them all instead)."""
    start = trainer.step_count
    try:
        yield
    except Exception as e:
        # Not on a full disk (another checkpoint cannot be written either), nor after a diverged
        # update (its weights are never saved: the last checkpoint before it stays the newest).
        if trainer.accelerator.num_processes == 1 and trainer.output_dir is not None and trainer.step_count > start \
                and not _disk_full(e) and not isinstance(e, DivergedError):
            try:
                path = trainer.save_checkpoint(extra)
            except Exception as failed:  # the original error is the one to report
                print(f"error during step {trainer.step_count + 1}; the checkpoint of the steps done could not be "
                      f"written either ({type(failed).__name__}: {failed})", file=sys.stderr, flush=True)
                raise e from None
            print(f"error during step {trainer.step_count + 1}: the {trainer.step_count} steps done are saved in "
                  f"{path}; once the cause is fixed, resume with: {resume_command(run_dir)}", file=sys.stderr, flush=True)
        raise


def _disk_full(e: BaseException) -> bool:
    """A full disk, or a file over the process's size limit: another checkpoint would fail the
    same way (and could only leave less room), so none is tried. Writers' own errors for these
    (torch.save's, safetensors') reach here already as OSError (serialization.writer_os_error)."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EFBIG)
