"""Env packages whose ids gymnasium knows only once the package has registered them.

``gym.make("MinAtar/Breakout-v1")`` fails until ``minatar.gym.register_envs()`` has run, and the
Atari ids until ``gymnasium.register_envs(ale_py)`` has, MiniGrid's until ``import minigrid``: an
id's namespace (or, without one, its prefix) names the package to import and the call that
registers it. Nothing is imported before an id of its namespace is asked
for, and a package that is not installed stays gymnasium's own error, naming the extra to install.
"""

from __future__ import annotations

import importlib

__all__ = ["NAMESPACES", "PREFIXES", "register_namespace"]

# namespace -> (module, its function that registers the ids, or None when importing registers them)
NAMESPACES: dict[str, tuple[str, str | None]] = {
    "MinAtar": ("minatar.gym", "register_envs"),
    "ALE": ("ale_py", None),
}


# id prefix -> the module whose import registers the ids (no namespace: MiniGrid-Empty-5x5-v0)
PREFIXES: dict[str, str] = {"MiniGrid-": "minigrid", "BabyAI-": "minigrid"}


def register_namespace(env_id: str) -> bool:
    """Import and register the package of ``env_id``'s namespace (or id prefix); False when it has
    none here or is not installed."""
    namespace = env_id.split("/", 1)[0] if "/" in env_id else None
    prefix = next((p for p in PREFIXES if env_id.startswith(p)), None)
    if prefix is not None:
        namespace, register_by = None, (PREFIXES[prefix], None)
    elif namespace in NAMESPACES:
        register_by = NAMESPACES[namespace]
    else:
        return False
    module_name, register = register_by
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False
    if register is not None:
        getattr(module, register)()
    elif namespace is not None:
        import gymnasium as gym

        gym.register_envs(module)
    return True
