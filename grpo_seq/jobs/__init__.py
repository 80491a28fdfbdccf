"""The job layer: one serialisable spec per kind of run, validated once, and one function that
runs a spec with callbacks and returns its summary. Every door (the command line, the
Stable-Baselines3 class, the TRL trainer) is a translation onto it.

    from grpo_seq.jobs import EnvJob, run_job
    summary = run_job(EnvJob(env_id="CartPole-v1", seed=3))
    spec = load_spec("runs/<run>/config.json")       # a run folder's config.json is its spec
    spec.output_dir = "runs/again"
    summary = run_job(spec)                          # the same run again

The spec classes load light (no torch); the runners load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .callbacks import CallbackList, JobCallbacks, Progress
from .spec import JobSpec, load_spec, save_spec, spec_from_dict, spec_to_dict

if TYPE_CHECKING:
    from .env_spec import EnvJob
    from .lm_spec import LMJob
    from .text_env_spec import TextEnvJob
    from .agent_spec import AgentJob

__all__ = ["EnvJob", "LMJob", "TextEnvJob", "AgentJob", "JobSpec", "JobCallbacks", "CallbackList", "Progress",
           "load_spec", "save_spec", "spec_from_dict", "spec_to_dict", "run_job"]

_LAZY = {"EnvJob": ".env_spec", "LMJob": ".lm_spec", "TextEnvJob": ".text_env_spec", "AgentJob": ".agent_spec"}
# kind -> (module, function) that runs a spec of that kind
_RUNNERS = {"env": (".env", "run_env_job"), "lm": (".lm", "run_lm_job"),
            "text_env": (".text_env", "run_text_env_job"), "agent": (".agent", "run_agent_job")}


def run_job(spec: Any, callbacks: JobCallbacks | list[JobCallbacks] | None = None, **parts: Any) -> dict[str, Any]:
    """Run ``spec`` to its end with ``callbacks`` hearing it; returns the run's summary.
    ``parts``: what a door hands in that no spec can name (see the kind's runner)."""
    module, name = _RUNNERS[spec.KIND]
    return getattr(importlib.import_module(module, __name__), name)(spec, callbacks, **parts)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
