"""The run folder of a training run: its lock, config.json, metrics.jsonl, and the trackers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accelerate import Accelerator

from ..io import checkpoint as ckpt
from ..io.launch_record import launch_record
from ..io.metrics import JsonlLogger
from ..io.run_dir import RunLock, check_not_nested, foreign_run_error, replace_run, run_files, stopped_before_checkpoint
from ..io.serialization import atomic_write_text
from ..io.tracking import tracker_config

__all__ = ["RunFolder"]


class RunFolder:
    """``output_dir`` (None: nothing is written) locked for this run on the main process
    (:class:`grpo_seq.io.run_dir.RunLock`), and the trackers the accelerator was built with started
    (recipes: ``tracker_kwargs(--report_to)``).

    A folder that already holds a run is replaced with ``overwrite``, or when that run stopped
    before its first checkpoint; otherwise it is refused at this run's first write (:meth:`start`),
    unless the run resumes the run the folder holds (``resume_folder`` inside it, or
    :meth:`adopt`)."""

    def __init__(self, output_dir: str | Path | None, overwrite: bool, accelerator: Accelerator,
                 config: dict[str, Any], resume_folder: Path | None):
        self.path = self.path_of(output_dir)
        self.accelerator = accelerator
        self.logger: JsonlLogger | None = None
        self.lock: RunLock | None = None
        self._foreign_run: list[str] = []
        if self.path is not None and accelerator.is_main_process:
            check_not_nested(self.path)
            self.lock = RunLock(self.path).acquire()
            resuming = resume_folder is not None and ckpt.run_dir_of(resume_folder).resolve() == self.path.resolve()
            found = run_files(self.path)
            if found and not resuming:
                if overwrite:
                    replace_run(self.path, found)
                elif stopped_before_checkpoint(self.path, found):
                    replace_run(self.path, found, "replacing a run that stopped before its first checkpoint in")
                else:
                    self._foreign_run = found
        self.tracking = bool(getattr(accelerator, "log_with", None))
        if self.tracking:
            name = self.path.name if self.path is not None else "grpo-seq"
            accelerator.init_trackers(name, config=tracker_config(config))

    @staticmethod
    def path_of(output_dir: str | Path | None) -> Path | None:
        return Path(output_dir).expanduser() if output_dir else None

    def adopt(self, checkpoint: Path) -> None:
        """The run being resumed from ``checkpoint`` is the one this folder holds: not foreign."""
        if self.lock is not None and self.path.resolve() == ckpt.run_dir_of(checkpoint).resolve():
            self._foreign_run = []

    def start(self, config: dict[str, Any]) -> None:
        """Before the run's first write: refuse a folder holding another run; write config.json
        (``config`` with the launch record: fed back with --config, it repeats the run) and open
        metrics.jsonl (main process)."""
        if self.logger is not None or self.lock is None:
            return
        if self._foreign_run:
            self.lock.release()
            raise foreign_run_error(self.path, self._foreign_run)
        record = {**config, **launch_record(self.accelerator)}
        atomic_write_text(self.path / "config.json", json.dumps(record, indent=2))
        self.logger = JsonlLogger(self.path / "metrics.jsonl")

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Append a row to metrics.jsonl (main process only) and send it to the trackers, at ``step``."""
        if self.logger is not None:
            self.logger.log(metrics)
        if self.tracking:  # a NaN (a statistic of no scored token) is left out rather than plotted
            self.accelerator.log({k: v for k, v in metrics.items() if k != "step" and v == v}, step=step)

    def close(self) -> None:
        """Close metrics.jsonl and the trackers, and release the folder."""
        if self.lock is not None:
            self.lock.release()
        if self.logger is not None:
            self.logger.close()
        if self.tracking:
            self.accelerator.end_training()
