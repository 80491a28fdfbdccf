"""Command-line parsing for the recipes: a config dataclass's fields become its flags, and a
YAML file (``--config recipe.yaml``) can give any of them, flags on the command line winning."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, Sequence, TypeVar

from transformers import HfArgumentParser

__all__ = ["parse_config", "yaml_to_flags", "defaults_yaml", "options_table"]

T = TypeVar("T")


def yaml_to_flags(path: str | Path, cls: type) -> tuple[list[str], dict[str, Any]]:
    """The flags a YAML mapping of ``cls`` field names stands for (``lr: 1e-3`` -> ``--lr 1e-3``),
    and the options it sets to null or to an empty list, which no flag can say: those become
    parser defaults.

    The values then go through the same argparse conversion and checks as typed flags, and a
    later flag for the same option overrides them. Raises ``ValueError`` naming the file for
    an unreadable file, a non-mapping, or a key that is not an option.
    """
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ValueError(f"--config {path}: cannot read it ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        raise ValueError(f"--config {path}: not valid YAML ({e})") from None
    if data is None:
        return [], {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of option: value, got a {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"--config {path}: unknown option(s) {unknown}; the options are {sorted(names)}")
    flags: list[str] = []
    nulls: dict[str, Any] = {}
    for key, value in data.items():
        if value is None or (isinstance(value, (list, tuple)) and not value):
            nulls[key] = None if value is None else []
        elif isinstance(value, (list, tuple)):
            flags += [f"--{key}", *(_text(v) for v in value)]
        elif isinstance(value, dict):
            raise ValueError(f"--config {path}: option {key!r} takes a single value or a list, got a mapping")
        else:
            flags += [f"--{key}", _text(value)]
    return flags, nulls


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_config(cls: type[T], argv: Sequence[str] | None = None) -> T:
    """``cls`` filled from ``--config FILE.yaml`` (when given) and the command line.

    ``--help`` lists every field with its help text. A value the config refuses (its
    ``__post_init__`` raises ``ValueError`` naming the field) or a bad YAML file ends the
    program with that message and exit status 2, as argparse does for a bad flag.
    """
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = HfArgumentParser(cls)
    parser.add_argument("--config", default=None, metavar="FILE.yaml",
                        help="YAML file of option: value pairs (recipes/configs/ has the defaults); flags override it.")
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    try:
        flags, nulls = yaml_to_flags(known.config, cls) if known.config else ([], {})
        parser.set_defaults(**nulls)
        cfg, *_ = parser.parse_args_into_dataclasses(args=flags + argv)
    except ValueError as e:
        parser.error(str(e))
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
