"""The console view of a job: a progress bar, and the run's lines printed above it (main process)."""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm

from .callbacks import JobCallbacks

__all__ = ["Console"]


class Console(JobCallbacks):
    """A tqdm bar over the run's :meth:`progress`, with its figures beside it; messages are
    written above the bar so they do not break it. Nothing is shown on other processes."""

    def __init__(self, desc: str | None = None):
        self.desc = desc
        self.bar: Any = None

    def on_start(self, run: Any) -> None:
        if not run.is_main_process:
            return
        p = run.progress()
        self.bar = tqdm(total=p.total, initial=min(p.done, p.total), unit=p.unit, desc=self.desc or run.label)

    def on_step(self, run: Any, metrics: dict[str, float]) -> None:
        if self.bar is not None:
            p = run.progress()
            self.bar.update(min(p.done, p.total) - self.bar.n)
            self.bar.set_postfix(p.shown)

    def on_message(self, run: Any, text: str) -> None:
        if run.is_main_process:
            tqdm.write(text) if self.bar is not None else print(text, flush=True)

    def on_end(self, run: Any, summary: dict[str, Any]) -> None:
        self.close()

    def close(self) -> None:
        # closed on an error too, so the error line starts a line of its own
        if self.bar is not None:
            self.bar.close()
            self.bar = None
