"""The command-line door: ``grpo-seq`` and the recipes. Options become job specs
(:mod:`.parse`), the programs run them (:mod:`.programs`), and misuse ends as one
``error: ...`` line (:mod:`.errors`). Nothing else in the package parses arguments.

The names below load on first use: ``grpo-seq`` itself (:mod:`.commands`) starts without torch or
transformers, so ``--help``, a mistyped command and Ctrl-C answer at once."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"parse_config": ".parse", "spec_file_values": ".parse", "defaults_yaml": ".parse", "options_table": ".parse",
          "PATH_OPTIONS": ".parse", "cli_errors": ".errors", "note_run_dir": ".errors", "NoteRunDir": ".errors",
          "exit_with": ".errors"}
__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name], __name__), name)
