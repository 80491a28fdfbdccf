"""Agents that speak the OpenAI API, trained unchanged: the policy served behind a local
``base_url`` while it trains, every call recorded, the trajectories trained.

- :mod:`.endpoint` and :mod:`.app`: ``/v1/chat/completions`` and ``/v1/models`` over the policy,
  one base URL per rollout, every call recorded (:mod:`.openai_format`: the wire format);
- :mod:`.server`: uvicorn on 127.0.0.1 in a background thread;
- :mod:`.prompts`: messages to prompt ids, continuing a rollout's earlier calls by their sampled ids;
- :mod:`.trajectory`: calls to sequences (model tokens mask 1, the rest 0) and to the batch;
- :mod:`.rollout_fn`: the user's ``async def rollout(client, item)``, loaded and its results checked;
- :mod:`.sampler`: :class:`AgentGroupSampler`, G rollouts per item each step.

The job that trains one is :class:`grpo_seq.jobs.agent_spec.AgentJob` (``grpo-seq train-agent``).
Nothing here loads at ``import grpo_seq.agents``: fastapi, uvicorn and openai are the agents extra.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["AgentGroupSampler", "PolicyEndpoint", "Limits", "Call", "Trajectory", "split_sequences"]

_LAZY = {"AgentGroupSampler": ".sampler", "PolicyEndpoint": ".endpoint", "Limits": ".endpoint", "Call": ".trajectory",
         "Trajectory": ".trajectory", "split_sequences": ".trajectory"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
