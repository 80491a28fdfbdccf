"""verifiers environments as items: ``--dataset verifiers:TASKSET`` (the package ``verifiers`` >= 0.4,
its ``verifiers.v1`` stack; with ``--rollout verifiers:TASKSET`` an agent job trains the environment,
:mod:`grpo_seq.agents.verifiers_env`).

An environment is loaded as verifiers loads it, ``vf.load_environment(vf.resolve_env_config(config))``:
the taskset by its id (a module on the path exporting one ``Taskset``), its agent seat from
``config["agent"]``. ``--dataset_config`` (JSON) is that config, over these defaults: the ``null``
harness (verifiers' tool-less chat loop) in a ``subprocess`` runtime, because verifiers' own
defaults are a shell harness in a remote sandbox. A row is a task's data as JSON
(``task.data.model_dump(mode="json")``: its prompt, answer and the fields its taskset adds), which
the rollout turns back into the task. verifiers has no train/held-out split: a held-out set is
another taskset (``--eval_dataset verifiers:OTHER``), or the same one's rows past ``--eval_size``.

verifiers 0.4 pins ``openai<3``; where that conflicts with the ``openai`` installed here, install
it in an environment of its own (docs/guides/agents.md says how).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from ...errors import UsageError
from ..rows import Rows

__all__ = ["SCHEME", "LOCAL_AGENT", "verifiers_module", "load_env", "verifiers_rows"]

SCHEME = "verifiers:"
LOCAL_AGENT = {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}


def verifiers_module() -> Any:
    """``verifiers.v1``, or one error line saying how to install it."""
    try:
        import verifiers.v1 as vf
    except ImportError as e:
        raise UsageError(f"verifiers environments need the package verifiers >= 0.4 ({e}): pip install verifiers "
                         "(it pins openai<3: docs/guides/agents.md)") from None
    return vf


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_env(taskset: str, config: str | None = None, flag: str = "--dataset") -> Any:
    """The environment of taskset ``taskset`` with ``config`` (JSON of verifiers' env config, over
    :data:`LOCAL_AGENT`); loaded once per process for the items and the rollouts. Errors name ``flag``."""
    if not taskset:
        raise UsageError(f"{flag} {SCHEME}: name a taskset, e.g. {SCHEME}my-qa")
    try:
        over = json.loads(config) if config else {}
    except json.JSONDecodeError as e:
        raise UsageError(f"--dataset_config: not JSON: {e}") from None
    if not isinstance(over, dict):
        raise UsageError(f"--dataset_config: give verifiers' env config as a JSON object, got {config}")
    vf = verifiers_module()
    try:
        return _load(vf, json.dumps(_merged({"taskset": {"id": taskset}, "agent": LOCAL_AGENT}, over), sort_keys=True))
    except Exception as e:  # noqa: BLE001 - verifiers' own refusal, in its words
        raise UsageError(f"{flag} {SCHEME}{taskset}: verifiers could not load it: {type(e).__name__}: "
                         f"{' '.join(str(e).split())}") from None


@functools.lru_cache(maxsize=8)
def _load(vf: Any, settings: str) -> Any:
    return vf.load_environment(vf.resolve_env_config(json.loads(settings)))


def verifiers_rows(dataset: str, split: str = "train", config: str | None = None) -> Rows:
    """Every task of ``--dataset verifiers:TASKSET`` as a row (``split`` is the caller's name only:
    verifiers has none)."""
    taskset = dataset[len(SCHEME):].strip()
    env = load_env(taskset, config)
    rows = [task.data.model_dump(mode="json") for task in env.taskset]
    if not rows:
        raise UsageError(f"--dataset {dataset}: the taskset holds no tasks")
    return Rows(rows, [f"--dataset {dataset} task {i}" for i in range(len(rows))])
