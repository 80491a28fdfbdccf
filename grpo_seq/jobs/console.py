"""The console view of a job: a progress bar, and the run's lines printed above it (main process)."""

from __future__ import annotations

import time
from typing import Any

from tqdm.auto import tqdm

from .callbacks import JobCallbacks

__all__ = ["Console"]


class Console(JobCallbacks):
    """A tqdm bar over the run's :meth:`progress`, with its figures beside it; messages are
    written above the bar so they do not break it. Nothing is shown on other processes."""

    def __init__(self, desc: str | None = None, status_every: float = 0.5):
        self.desc = desc
        self.bar: Any = None
        self.status_every, self._status_at, self._status_kind = status_every, 0.0, ""

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

    def on_status(self, run: Any, text: str) -> None:
        # a count in a status can change every few milliseconds: redraw it twice a second, and a
        # status of another kind ("step 1: sampling ...: token 5" -> "step 1: scoring") at once
        now, kind = time.monotonic(), text.rsplit(":", 1)[0]
        if self.bar is not None and (now - self._status_at >= self.status_every or kind != self._status_kind):
            self._status_at, self._status_kind = now, kind
            self.bar.set_postfix_str(text)

    def on_end(self, run: Any, summary: dict[str, Any]) -> None:
        self.close()

    def close(self) -> None:
        # closed on an error too, so the error line starts a line of its own
        if self.bar is not None:
            self.bar.close()
            self.bar = None
