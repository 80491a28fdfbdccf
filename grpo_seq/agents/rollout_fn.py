"""The user's rollout function: found by import path, its results checked.

A rollout function is ``async def rollout(client, item) -> float | dict``: ``client`` an
``openai.AsyncOpenAI`` whose ``base_url`` records what it asks into this rollout's trajectory,
``item`` one dataset row (a dict). It returns the rollout's reward, or a dict of ``reward`` with,
optionally, ``metrics`` (name -> number, averaged over the step's rollouts into
``agent/<name>``) and ``call_rewards`` (one number per call it made, each on its call's reply:
per-turn credit for ``--advantage stepwise``).

Everything wrong with it is a :class:`~grpo_seq.errors.UsageError` whose one line names the
function (and, for a result, the item): a module that will not import, no such function, a
function that is not ``async``, a reward that is not a finite number, a wrong count of
``call_rewards``.
"""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import UsageError

__all__ = ["RolloutResult", "load_rollout", "check_result"]


@dataclass
class RolloutResult:
    """A rollout's reward, per-call rewards (or None) and metrics, checked."""

    reward: float
    call_rewards: list[float] | None = None
    metrics: dict[str, float] = field(default_factory=dict)


def load_rollout(path: str, option: str = "--rollout", config: str | None = None) -> Callable[..., Any]:
    """The ``async`` function ``module:function`` names (the working folder is importable from
    the programs), or a verifiers environment's, ``verifiers:TASKSET`` (``config``: its env config,
    JSON; :mod:`grpo_seq.agents.verifiers_env`)."""
    if path.startswith("verifiers:"):
        from .verifiers_env import verifiers_rollout

        return verifiers_rollout(path, config)
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{option} {path}: give module:function, e.g. mypkg.agent:rollout")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        where = "" if e.name == module_name else f" (it imports {e.name!r}, which is not installed)"
        raise UsageError(f"{option} {path}: no module {module_name!r}{where}; run from the folder that holds it, "
                         "or install it") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's module: any failure is theirs to fix
        raise UsageError(f"{option} {path}: importing {module_name!r} raised {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{option} {path}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not inspect.iscoroutinefunction(obj) and not inspect.iscoroutinefunction(getattr(obj, "__call__", None)):
        raise UsageError(f"{option} {path}: must be an async function, async def rollout(client, item) -> "
                         f"float | dict; got {type(obj).__name__}")
    return obj


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def check_result(result: Any, calls: int, culprit: str) -> RolloutResult:
    """``result`` as a :class:`RolloutResult`; ``calls``: how many the rollout made; ``culprit``
    names the function and item in the message."""
    if not isinstance(result, dict):
        reward = _number(result)
        if reward is None:
            raise UsageError(f"{culprit}: returned {result!r}; a rollout returns a finite number (its reward) or "
                             "a dict with one under 'reward'")
        return RolloutResult(reward)
    unknown = sorted(set(result) - {"reward", "metrics", "call_rewards"})
    if unknown:
        raise UsageError(f"{culprit}: returned a dict with {unknown}; its keys are reward, metrics and call_rewards")
    reward = _number(result.get("reward"))
    if reward is None:
        raise UsageError(f"{culprit}: returned reward {result.get('reward')!r}; give a finite number")
    metrics = result.get("metrics") or {}
    if not isinstance(metrics, dict) or any(_number(v) is None for v in metrics.values()):
        raise UsageError(f"{culprit}: returned metrics {metrics!r}; give a dict of name -> finite number")
    per_call = result.get("call_rewards")
    if per_call is not None:
        values = [_number(v) for v in per_call] if isinstance(per_call, (list, tuple)) else [None]
        if None in values or len(values) != calls:
            raise UsageError(f"{culprit}: returned call_rewards {per_call!r}; give one finite number per call it made "
                             f"({calls})")
        per_call = values
    return RolloutResult(reward, per_call, {str(k): float(v) for k, v in metrics.items()})
