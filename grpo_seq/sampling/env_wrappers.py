"""Observation and action wrappers named by import path (rl-zoo3's ``env_wrapper``), put around the
env that ``gym.make`` returns, in order, before the policy's view of it (``as_tokens``): the same
wrappers in training, in evaluation and in a saved policy's acting.

``minigrid.wrappers:ImgObsWrapper`` keeps a MiniGrid observation's image and drops its mission
text, which no policy of numbers reads; ``module.Class`` (rl-zoo3's spelling) reads the same. A
path that imports nothing, or names no class or function, is one error line naming the option.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Sequence

from ..errors import UsageError

__all__ = ["Wrapper", "load_wrappers", "apply_wrappers"]

Wrapper = Callable[[Any], Any]


def load_wrappers(paths: Sequence[str], flag: str = "--env_wrappers") -> list[Wrapper]:
    """The callables ``paths`` name (``module:Name`` or ``module.Name``), each taking an env and
    returning the wrapped env."""
    return [_load(path, flag) for path in paths]


def _load(path: str, flag: str) -> Wrapper:
    module_name, sep, name = path.partition(":") if ":" in path else path.rpartition(".")
    if not sep or not module_name or not name:
        raise UsageError(f"{flag}: {path!r} is not an import path; give module:Wrapper, e.g. "
                         "minigrid.wrappers:ImgObsWrapper")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"{flag}: {path!r}: cannot import {module_name} ({e})") from None
    wrapper = getattr(module, name, None)
    if not callable(wrapper):
        raise UsageError(f"{flag}: {path!r}: {module_name} has no class or function {name!r}")
    return wrapper


def apply_wrappers(env: Any, wrappers: Sequence[Wrapper]) -> Any:
    """``env`` inside each of ``wrappers``, the first innermost."""
    for wrap in wrappers:
        env = wrap(env)
    return env
