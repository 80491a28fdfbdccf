"""A verifiers environment as an agent job's rollout: ``--rollout verifiers:TASKSET`` (with
``--dataset verifiers:TASKSET``: its tasks are the items, :mod:`grpo_seq.io.sources.verifiers`).

Each rollout runs one episode of the environment, ``await env.run_episode(task, ctx)``, against the
rollout's own base URL: verifiers talks to the model through its own client, made from
``ctx.client`` (a ``base_url`` and the name of the variable holding the key), and relays each call
of its harness there, streamed (the endpoint answers ``stream: true``), so every call is recorded
into the rollout's trajectory as any agent's is. The reward is the episode's trace's, computed by
the environment's own rubric when the episode closes; the trace's metrics go to ``agent/<name>``.
An episode that fails (``episode.ok`` false: the harness, a tool or the scoring raised) raises
with verifiers' errors, which the job reports naming the item.

No sampling options are passed: a rollout samples at the job's temperature and top-p, which the
endpoint enforces.
"""

from __future__ import annotations

import os
from typing import Any

from ..io.sources.verifiers import SCHEME, load_env, verifiers_module

__all__ = ["VerifiersRollout", "verifiers_rollout"]

KEY_VAR = "GRPO_SEQ_VERIFIERS_KEY"  # verifiers reads the key from a variable it is told the name of


class VerifiersRollout:
    """``async rollout(client, item)`` over the verifiers environment ``env``: one episode of the
    item's task against ``client``'s base URL; returns its reward and metrics."""

    def __init__(self, env: Any):
        self.env = env

    def task(self, item: dict[str, Any]) -> Any:
        """The environment's task of a row (:func:`grpo_seq.io.sources.verifiers.verifiers_rows`)."""
        kind = type(self.env.taskset).task_type()
        return kind(kind.data_type().model_validate(item), self.env.config.taskset.task)

    async def __call__(self, client: Any, item: dict[str, Any]) -> dict[str, Any]:
        vf = verifiers_module()
        os.environ[KEY_VAR] = client.api_key  # the job's key: the same for every rollout
        model = (await client.models.list()).data[0].id
        ctx = vf.ModelContext(model=model, client=vf.EvalClientConfig(base_url=str(client.base_url).rstrip("/"),
                                                                       api_key_var=KEY_VAR),
                              sampling=vf.SamplingConfig())
        episode = await self.env.run_episode(self.task(item), ctx)
        trace = episode.traces[0] if episode.traces else None
        if not episode.ok or trace is None or not trace.ok:
            raise RuntimeError(f"the verifiers episode failed: {_errors(episode, trace)}")
        # a metric the rubric did not compute is None; the rest are checked as any rollout's are
        return {"reward": trace.reward, "metrics": {k: v for k, v in (trace.metrics or {}).items() if v is not None}}


def _errors(episode: Any, trace: Any) -> str:
    """verifiers' errors of a failed episode (its own and its trace's: a harness's land on the
    trace), each as its type and the first line of its message."""
    found = [*episode.errors, *(trace.errors if trace is not None else [])]
    return "; ".join(f"{e.type}: {next(iter(str(e.message).splitlines()), '')}" for e in found) or "no trace"


def verifiers_rollout(path: str, config: str | None = None) -> VerifiersRollout:
    """The rollout of ``--rollout verifiers:TASKSET`` (``config``: the env config's JSON, the
    job's ``--dataset_config``)."""
    return VerifiersRollout(load_env(path[len(SCHEME):].strip(), config, flag="--rollout"))
