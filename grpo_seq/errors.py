"""The errors that mean "bad input", as opposed to a bug.

Everything the library raises because of what a user gave it (an option, a file, a dataset row,
a reward function, an environment, a run folder) is a :class:`UsageError`, with a message that
names the culprit and what to do. The command-line entry points print such an error as one
``error: ...`` line and exit with status 2; any other exception is unexpected and keeps its
traceback. Each is a ``ValueError`` (or ``FileNotFoundError``), so code that caught those before
still does.
"""

from __future__ import annotations

__all__ = ["UsageError", "ConfigError", "MissingPathError", "RunDirError", "NonFiniteError", "DivergedError", "require",
           "require_format"]


class UsageError(ValueError):
    """Bad input from the user; the message names it and the way out."""


class ConfigError(UsageError):
    """An option's value is refused (its name and value are in the message)."""


class MissingPathError(UsageError, FileNotFoundError):
    """A file or folder the user named does not exist or is not what it should be."""


class RunDirError(UsageError):
    """The run folder belongs to another run, or to a run still going on."""


class NonFiniteError(RuntimeError):
    """Training produced NaN or inf several optimizer steps in a row (not a usage error: the
    message names the likely causes, and the weights saved are the last finite ones)."""


class DivergedError(NonFiniteError):
    """The weights grew by orders of magnitude in one optimizer step (finite, but diverged):
    the run stops as for NaN, and the diverged weights are never saved."""


def require(cfg: object, name: str, ok: bool, why: str) -> None:
    """Refuse option ``name`` of ``cfg`` with :class:`ConfigError` (``--name: why, got value``) unless ``ok``.

    Every config dataclass validates through this, so an option refused from the command line,
    a spec file, the Stable-Baselines3 class or the TRL config reads the same."""
    if not ok:
        raise ConfigError(f"--{name}: {why}, got {getattr(cfg, name)!r}")


def require_format(cfg: object, name: str, field: str) -> None:
    """Refuse option ``name`` of ``cfg`` unless it is a format string whose one field is ``{field}``."""
    text = getattr(cfg, name)
    require(cfg, name, f"{{{field}}}" in text, f"must hold {{{field}}}")
    try:
        text.format(**{field: ""})
    except (KeyError, IndexError, ValueError) as e:
        require(cfg, name, False, f"must be a format string with {{{field}}} alone ({type(e).__name__}: {e})")
