"""What a door hears of a running job: :class:`JobCallbacks`, every hook a no-op by default.

A door passes its own to :func:`grpo_seq.jobs.run_job`: the command line a progress bar and
printed lines (:class:`grpo_seq.jobs.console.Console`), the TRL trainer transformers'
callbacks, a service its job's status. Each hook gets the run object (``run.spec``,
``run.trainer``, ``run.is_main_process``, ``run.progress()``) and is called on every process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

__all__ = ["JobCallbacks", "CallbackList", "Progress", "as_callbacks"]


@dataclass
class Progress:
    """How far a run is: ``done`` of ``total`` ``unit``s, and a few figures worth showing."""

    done: int
    total: int
    unit: str
    shown: dict[str, str] = field(default_factory=dict)


class JobCallbacks:
    """Hooks of a running job; subclass and override the ones you need."""

    def on_run_dir(self, path: Path) -> None:
        """The run folder is known (nothing is written yet)."""

    def on_start(self, run: Any) -> None:
        """The run is built (resumed, when asked) and about to take its first step."""

    def on_step(self, run: Any, metrics: dict[str, float]) -> bool | None:
        """After each training step; returning True stops the run there (saved as at the end)."""
        return None

    def on_eval(self, run: Any, result: dict[str, Any]) -> None:
        """After each evaluation (env jobs)."""

    def on_checkpoint(self, run: Any, path: Path) -> None:
        """After a checkpoint was written to ``path``."""

    def on_message(self, run: Any, text: str) -> None:
        """A line for the person watching: a warning, an estimate, an evaluation, the summary."""

    def on_status(self, run: Any, text: str) -> None:
        """What the run is doing now, often updated (sampling, token 120 of 256): a status, not a log line."""

    def on_end(self, run: Any, summary: dict[str, Any]) -> None:
        """The run finished and saved; ``summary`` is what it returns."""

    def close(self) -> None:
        """The run ended, finished or not (an error, a signal): release what the hooks hold."""


class CallbackList(JobCallbacks):
    """Several callbacks as one; a stop asked by any of them stops the run."""

    def __init__(self, callbacks: Iterable[JobCallbacks]):
        self.callbacks = list(callbacks)

    def on_run_dir(self, path: Path) -> None:
        for cb in self.callbacks:
            cb.on_run_dir(path)

    def on_start(self, run: Any) -> None:
        for cb in self.callbacks:
            cb.on_start(run)

    def on_step(self, run: Any, metrics: dict[str, float]) -> bool:
        return any([bool(cb.on_step(run, metrics)) for cb in self.callbacks])  # every one hears the step

    def on_eval(self, run: Any, result: dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_eval(run, result)

    def on_checkpoint(self, run: Any, path: Path) -> None:
        for cb in self.callbacks:
            cb.on_checkpoint(run, path)

    def on_message(self, run: Any, text: str) -> None:
        for cb in self.callbacks:
            cb.on_message(run, text)

    def on_status(self, run: Any, text: str) -> None:
        for cb in self.callbacks:
            cb.on_status(run, text)

    def on_end(self, run: Any, summary: dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_end(run, summary)

    def close(self) -> None:
        for cb in self.callbacks:
            cb.close()


def as_callbacks(callbacks: JobCallbacks | Iterable[JobCallbacks] | None) -> CallbackList:
    """None, one callbacks object or several, as one :class:`CallbackList`."""
    if callbacks is None:
        return CallbackList([])
    if isinstance(callbacks, JobCallbacks):
        return CallbackList([callbacks])
    return CallbackList(callbacks)
