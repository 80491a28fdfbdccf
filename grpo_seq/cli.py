"""Command-line parsing for the recipes: a config dataclass's fields become its flags."""

from __future__ import annotations

from typing import Sequence, TypeVar

from transformers import HfArgumentParser

__all__ = ["parse_config"]

T = TypeVar("T")


def parse_config(cls: type[T], argv: Sequence[str] | None = None) -> T:
    """``cls`` filled from the command line (``--help`` lists every field with its help text).

    A value the config refuses (its ``__post_init__`` raises ``ValueError`` naming the field)
    ends the program with that message and exit status 2, as argparse does for a bad flag,
    instead of a traceback.
    """
    parser = HfArgumentParser(cls)
    try:
        (cfg,) = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as e:
        parser.error(str(e))
    return cfg
