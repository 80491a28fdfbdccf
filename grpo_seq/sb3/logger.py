"""``model.logger``: what SB3 callbacks write to (``record``, ``dump``), printed as SB3's table.

With ``verbose >= 1`` each ``dump`` prints the recorded values grouped by prefix, as
Stable-Baselines3 does; with ``tensorboard_log`` they also go to
``<tensorboard_log>/<tb_log_name>_<n>/`` (torch's SummaryWriter; needs the tensorboard package).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError

__all__ = ["Logger", "format_table", "tensorboard_run_dir"]


def format_table(values: dict[str, Any]) -> str:
    """SB3's ``HumanOutputFormat`` layout: ``| group/ |`` headers, then ``|    key | value |`` rows."""
    rows: list[tuple[str, str]] = []
    last = None
    for key in sorted(values):
        group, _, name = key.rpartition("/")
        if group != last:
            rows.append((f"{group}/", ""))
            last = group
        v = values[key]
        rows.append((f"    {name}", f"{v:<8.3g}" if isinstance(v, float) else str(v)))
    kw, vw = max(len(k) for k, _ in rows), max(len(v) for _, v in rows)
    line = "-" * (kw + vw + 7)
    body = [f"| {k:<{kw}} | {v:<{vw}} |" for k, v in rows]
    return "\n".join([line, *body, line])


def tensorboard_run_dir(root: str | Path, name: str, reset: bool) -> Path:
    """``<root>/<name>_<n>``: the next free n (SB3's layout), or the latest one when not ``reset``."""
    root = Path(root)
    taken = [int(p.name.rsplit("_", 1)[1]) for p in root.glob(f"{name}_*") if p.name.rsplit("_", 1)[1].isdigit()]
    latest = max(taken, default=0)
    return root / f"{name}_{latest if (latest and not reset) else latest + 1}"


class Logger:
    """Key-value records for one dump; ``verbose`` prints the table, ``writer`` a SummaryWriter or None."""

    def __init__(self, verbose: int = 0):
        self.verbose = verbose
        self.name_to_value: dict[str, Any] = {}
        self.writer = None
        self.output_formats: list[Any] = []  # SB3's attribute; its own Logger stands in where SB3 is installed
        self.dir: str | None = None

    def open_tensorboard(self, folder: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UsageError("GRPO(tensorboard_log=...) needs the tensorboard package: pip install tensorboard") from None
        self.close()
        self.writer = SummaryWriter(log_dir=str(folder))

    def record(self, key: str, value: Any, exclude: Any = None) -> None:
        self.name_to_value[key] = value

    def record_mean(self, key: str, value: Any, exclude: Any = None) -> None:
        self.name_to_value[key] = value

    def dump(self, step: int = 0) -> None:
        if not self.name_to_value:
            return
        if self.verbose >= 1:
            print(format_table(self.name_to_value), flush=True)
        if self.writer is not None:
            for k, v in self.name_to_value.items():
                if isinstance(v, (int, float)):
                    self.writer.add_scalar(k, v, step)
            self.writer.flush()
        self.name_to_value = {}

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
