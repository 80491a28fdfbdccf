"""Command-line parsing for the recipes: a config dataclass's fields become its flags, and a
YAML file (``--config recipe.yaml``) can give any of them, flags on the command line winning.

:func:`cli_errors` is what every entry point runs inside: bad usage ends as one ``error: ...``
line with exit status 2, a full disk as one line with the resume command, a run stopped by NaN
as one line with status 1; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import os
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence, TypeVar

from transformers import HfArgumentParser

from .errors import ConfigError, NonFiniteError, UsageError

__all__ = ["parse_config", "yaml_to_flags", "defaults_yaml", "options_table", "cli_errors", "note_run_dir",
           "PATH_OPTIONS", "require", "run_folder"]

T = TypeVar("T")

# Options that name a file or folder: a leading ``~`` is expanded (``--output_dir=~/x`` reaches
# the program unexpanded by the shell, and would otherwise make a folder named ``~``).
PATH_OPTIONS = ("output_dir", "resume_from", "dataset", "model", "policy", "out")

_run_dir: Path | None = None


def note_run_dir(path: str | os.PathLike | None) -> None:
    """Tell :func:`cli_errors` this program's run folder, so a full disk can print the resume command."""
    global _run_dir
    _run_dir = Path(path) if path is not None else None


def _mount_point(path: Path) -> Path:
    """The mount point of the filesystem holding ``path`` (or its nearest existing parent)."""
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    dev = path.stat().st_dev
    while path != path.parent and path.parent.stat().st_dev == dev:
        path = path.parent
    return path


def _no_space_message(e: OSError) -> str:
    """One line: where the disk is full and, when the run folder holds a checkpoint, how to resume."""
    from .checkpoint import list_checkpoints
    from .stopping import resume_command

    where = _run_dir if _run_dir is not None else Path(e.filename) if e.filename else None
    if where is None:
        return "error: no space left on device; free some space and run again"
    msg = f"error: no space left on {_mount_point(where)} (writing to {where})"
    checkpoints = list_checkpoints(_run_dir) if _run_dir is not None else []
    if checkpoints:
        return (f"{msg}; the last complete checkpoint, {checkpoints[-1]}, is intact. Free some space, then resume "
                f"with: {resume_command(_run_dir)}")
    return f"{msg}; free some space and run again"


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Run an entry point's body: a :class:`UsageError` prints ``error: <message>`` and exits 2;
    ``OSError(ENOSPC)`` prints "no space left on <mount point>" and the resume command, exit 1;
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
        _exit(f"error: {_one_line(e)}", 2)
    except NonFiniteError as e:
        _exit(f"error: {_one_line(e)}", 1)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        _exit(_no_space_message(e), 1)


def _release_own_lock() -> None:
    """Free the run folder when this process's run ends on an error (a refused resume, NaN, a full
    disk), so the corrected command starts at once rather than finding a lock to take over."""
    if _run_dir is not None:
        from .run_dir import RunLock

        lock = RunLock(_run_dir)
        lock.held = True  # release() removes the file only when it holds this process's pid
        lock.release()


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _exit(line: str, code: int) -> None:
    print(line, file=sys.stderr, flush=True)
    raise SystemExit(code)


def run_folder(cfg: Any, fresh: str) -> str:
    """The run's folder: ``--output_dir``; else, resuming, the folder of the run ``--resume_from``
    names; else ``fresh``. A ``--resume_from`` that does not exist is refused here, before
    anything is created. Noted for :func:`cli_errors` (the resume command on a full disk)."""
    from .checkpoint import CheckpointError, run_dir_for

    if cfg.resume_from and not Path(cfg.resume_from).expanduser().exists():
        raise CheckpointError(f"--resume_from {cfg.resume_from}: no such checkpoint or run folder (nothing was "
                              "created); give the run folder of an earlier run, or one of its checkpoints/step_*")
    out = cfg.output_dir or (str(run_dir_for(cfg.resume_from)) if cfg.resume_from else fresh)
    note_run_dir(out)
    return out


def require(cfg: Any, name: str, ok: bool, why: str) -> None:
    """Refuse option ``name`` of ``cfg`` with :class:`ConfigError` (``--name: why, got value``) unless ``ok``."""
    if not ok:
        raise ConfigError(f"--{name}: {why}, got {getattr(cfg, name)!r}")


def _expand_paths(cfg: Any) -> None:
    for name in PATH_OPTIONS:
        value = getattr(cfg, name, None)
        if isinstance(value, str) and value.startswith("~"):
            setattr(cfg, name, os.path.expanduser(value))


def yaml_to_flags(path: str | Path, cls: type) -> tuple[list[str], dict[str, Any]]:
    """The flags a YAML mapping of ``cls`` field names stands for (``lr: 1e-3`` -> ``--lr 1e-3``),
    and the options it sets to null or to an empty list, which no flag can say: those become
    parser defaults.

    The values then go through the same argparse conversion and checks as typed flags, and a
    later flag for the same option overrides them. Raises :class:`ConfigError` naming the file for
    an unreadable file, a non-mapping, a key given twice (with its lines), or a key that is not an option.
    """
    import yaml

    path = Path(path).expanduser()
    try:
        data = yaml.load(path.read_text(), Loader=_unique_key_loader())
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read it ({e.strerror or e})") from None
    except _DuplicateKey as e:
        raise ConfigError(f"--config {path}: {e}; keep one of them") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path}: not valid YAML ({e})") from None
    if data is None:
        return [], {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of option: value, got a {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"--config {path}: unknown option(s) {unknown}; the options are {sorted(names)}")
    flags: list[str] = []
    nulls: dict[str, Any] = {}
    for key, value in data.items():
        if value is None or (isinstance(value, (list, tuple)) and not value):
            nulls[key] = None if value is None else []
        elif isinstance(value, (list, tuple)):
            flags += [f"--{key}", *(_text(v) for v in value)]
        elif isinstance(value, dict):
            raise ConfigError(f"--config {path}: option {key!r} takes a single value or a list, got a mapping")
        else:
            flags += [f"--{key}", _text(value)]
    return flags, nulls


class _DuplicateKey(Exception):
    pass


def _unique_key_loader() -> type:
    """A safe YAML loader that refuses a mapping with the same key twice (PyYAML keeps the last
    silently, so an option given twice in a file would lose one of its values)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                if isinstance(key, (str, int, float, bool)) and key in seen:
                    raise _DuplicateKey(f"option {key!r} is given twice (lines {seen[key]} and {line})")
                if isinstance(key, (str, int, float, bool)):
                    seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_config(cls: type[T], argv: Sequence[str] | None = None) -> T:
    """``cls`` filled from ``--config FILE.yaml`` (when given) and the command line.

    ``--help`` lists every field with its help text. A value the config refuses (its
    ``__post_init__`` raises ``ValueError`` naming the field) or a bad YAML file ends the
    program with one ``error: ...`` line and exit status 2, as argparse does for a bad flag.
    A leading ``~`` in a path option (:data:`PATH_OPTIONS`) is expanded.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = HfArgumentParser(cls)
    # an unknown or malformed flag: one line, as for every other misuse (not argparse's usage block)
    parser.error = lambda message: _exit(f"error: {message}; see {parser.prog} --help", 2)  # type: ignore[method-assign]
    parser.add_argument("--config", default=None, metavar="FILE.yaml",
                        help="YAML file of option: value pairs (recipes/configs/ has the defaults); flags override it.")
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    try:
        flags, nulls = yaml_to_flags(known.config, cls) if known.config else ([], {})
        parser.set_defaults(**nulls)
        cfg, *_ = parser.parse_args_into_dataclasses(args=flags + argv)
        _expand_paths(cfg)
    except ValueError as e:
        _exit(f"error: {_one_line(e)}", 2)
    return cfg


def _defaults(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None
        out.append((f, value))
    return out


def defaults_yaml(cls: type, title: str) -> str:
    """Every option of ``cls`` with its default, its help text as a comment above it."""
    import textwrap

    import yaml

    lines = [f"# {title}", "# Generated from the config dataclass by recipes/configs/generate.py; edit a copy.", ""]
    for f, value in _defaults(cls):
        for part in textwrap.wrap(f.metadata.get("help", ""), 96):
            lines.append(f"# {part}")
        dumped = yaml.safe_dump({f.name: value}, default_flow_style=True, width=10_000).strip()[1:-1]
        lines.append(dumped)
    return "\n".join(lines) + "\n"


def options_table(cls: type) -> str:
    """A markdown table of ``cls``'s options: flag, default, help."""
    rows = ["| option | default | what it does |", "| --- | --- | --- |"]
    for f, value in _defaults(cls):
        shown = " ".join(str(v) for v in value) if isinstance(value, list) else value
        help_ = f.metadata.get("help", "").replace("|", "\\|")
        rows.append(f"| `--{f.name}` | `{shown}` | {help_} |")
    return "\n".join(rows) + "\n"
