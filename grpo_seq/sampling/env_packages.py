"""Env packages whose ids gymnasium knows only once the package has registered them.

``gym.make("MinAtar/Breakout-v1")`` fails until ``minatar.gym.register_envs()`` has run, and the
Atari ids until ``gymnasium.register_envs(ale_py)`` has: an id's namespace names the package to
import and the call that registers it. Nothing is imported before an id of its namespace is asked
for, and a package that is not installed stays gymnasium's own error, naming the extra to install.
"""

from __future__ import annotations

import importlib

__all__ = ["NAMESPACES", "register_namespace"]

# namespace -> (module, its function that registers the ids, or None when importing registers them)
NAMESPACES: dict[str, tuple[str, str | None]] = {
    "MinAtar": ("minatar.gym", "register_envs"),
    "ALE": ("ale_py", None),
}


def register_namespace(env_id: str) -> bool:
    """Import and register the package of ``env_id``'s namespace; False when it has none here or
    is not installed."""
    namespace = env_id.split("/", 1)[0] if "/" in env_id else None
    if namespace not in NAMESPACES:
        return False
    module_name, register = NAMESPACES[namespace]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False
    if register is not None:
        getattr(module, register)()
    else:
        import gymnasium as gym

        gym.register_envs(module)
    return True
