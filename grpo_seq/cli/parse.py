"""Command-line parsing: a config dataclass's fields become its flags, and a spec file
(``--config FILE``, YAML or JSON: a run folder's ``config.json`` is one) can give any of them,
flags on the command line winning. The only place in the package that parses arguments."""

from __future__ import annotations

import argparse
import difflib
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Sequence, TypeVar

from transformers import HfArgumentParser

from ..io.launch_record import LAUNCH_KEY
from ..errors import ConfigError
from ..jobs.spec import coerce_values, read_mapping
from .errors import one_line, exit_with

__all__ = ["parse_config", "spec_file_values", "defaults_yaml", "options_table", "PATH_OPTIONS"]

T = TypeVar("T")

# Options that name a file or folder: a leading ``~`` is expanded (``--output_dir=~/x`` reaches
# the program unexpanded by the shell, and would otherwise make a folder named ``~``).
PATH_OPTIONS = ("output_dir", "resume_from", "dataset", "model", "policy", "out")


def _expand_paths(cfg: Any) -> None:
    for name in PATH_OPTIONS:
        value = getattr(cfg, name, None)
        if isinstance(value, str) and value.startswith("~"):
            setattr(cfg, name, os.path.expanduser(value))


def spec_file_values(path: str | Path, cls: type) -> dict[str, Any]:
    """The options a spec file gives ``cls``, each checked against its field's type. Its
    ``kind``, when it names one, must be the kind ``cls`` runs. Raises :class:`ConfigError`
    naming the file for an unreadable file, invalid YAML, a key given twice, a non-mapping, an
    unknown option or a value of the wrong type."""
    source = f"--config {Path(path).expanduser()}"
    data = read_mapping(path, source)
    kind, own = data.pop("kind", None), getattr(cls, "KIND", None)
    data.pop(LAUNCH_KEY, None)  # how a launcher ran the run the file comes from: not an option
    if kind is not None and own is not None and kind != own:
        raise ConfigError(f"{source}: holds a {kind!r} job; this program runs {own!r} jobs")
    if kind is not None and own is None:
        data["kind"] = kind  # not a job spec: refused below as an unknown option
    return coerce_values(cls, data, source)


def parse_config(cls: type[T], argv: Sequence[str] | None = None) -> T:
    """``cls`` filled from ``--config FILE`` (when given) and the command line.

    ``--help`` lists every field with its help text. A value the config refuses (its
    ``__post_init__`` raises ``ValueError`` naming the field) or a bad spec file ends the
    program with one ``error: ...`` line and exit status 2, as argparse does for a bad flag.
    A leading ``~`` in a path option (:data:`PATH_OPTIONS`) is expanded.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = HfArgumentParser(cls, allow_abbrev=False)  # a cut-short flag is a typo, not another option
    parser.usage = "%(prog)s [--config FILE] [--OPTION VALUE ...]"  # not every option's synopsis: they follow
    first = getattr(cls, "FIRST_OPTIONS", ())
    if first:  # several hundred lines follow: say where to start
        parser.description = (f"Start with: {', '.join('--' + name for name in first)}. Every other option has a "
                              "default; all of them follow, and --config FILE takes them from a YAML or JSON file.")
    _plain_negations(parser)
    # an unknown or malformed flag: one line, as for every other misuse (not argparse's usage block)
    parser.error = lambda message: exit_with(f"error: {message}; see {parser.prog} --help", 2)  # type: ignore[method-assign]
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="YAML or JSON file of option: value pairs (a run folder's config.json repeats that run; "
                        "recipes/configs/ has the defaults); flags override it.")
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    try:
        # the file's values become the parser's defaults: typed already, and any flag overrides them
        parser.set_defaults(**(spec_file_values(known.config, cls) if known.config else {}))
        cfg, *rest = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
        if rest[-1]:
            parser.error(f"unknown option(s) {rest[-1]}{_did_you_mean(parser, rest[-1])}")
        _expand_paths(cfg)
    except ValueError as e:
        exit_with(f"error: {one_line(e)}", 2)
    return cfg


def _did_you_mean(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """`` (did you mean --x?)`` for the first unknown flag that is close to one of the parser's."""
    flags = [o for action in parser._actions for o in action.option_strings if "-" not in o[2:]]  # not --x-y aliases
    for arg in unknown:
        if arg.startswith("--"):
            typed = arg.split("=", 1)[0]
            close = [f for f in flags if f.startswith(typed)][:3] or difflib.get_close_matches(typed, flags, n=1)
            if close:
                return f" (did you mean {' or '.join(close)}?)"
    return ""


def _plain_negations(parser: argparse.ArgumentParser) -> None:
    """``--no_x`` (what HfArgumentParser adds for an option on by default) says what it does in
    --help, instead of repeating ``--x``'s help with "(default: False)"."""
    for action in parser._actions:
        negated = next((s for s in action.option_strings if s.startswith("--no_")), None)
        if negated is not None and isinstance(action, argparse._StoreFalseAction):
            action.help = f"The same as --{action.dest} false."
            action.default = argparse.SUPPRESS  # the --x option before it holds the default


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
    """Every option of ``cls`` with its default, its help text as a comment above it; a job
    spec's kind first."""
    import textwrap

    import yaml

    lines = [f"# {title}", "# Generated from the config dataclass by recipes/configs/generate.py; edit a copy.", ""]
    if getattr(cls, "KIND", None):
        lines += ["# The kind of job this spec describes.", f"kind: {cls.KIND}"]
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
