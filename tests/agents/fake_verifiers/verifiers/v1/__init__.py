"""A stand-in of verifiers 0.4's ``verifiers.v1``: the names and shapes the adapter
(grpo_seq/agents/verifiers_env.py) uses, as verifiers' source has them, and one environment,
``fake-qa``, run as verifiers' ``null`` harness runs one: the task's prompt as one user message,
one chat call streamed from the base URL the context gives (the key read from the variable it
names; a stream that does not end in ``[DONE]`` fails the episode), the rubric's reward when the
episode closes."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx
from pydantic import BaseModel

LOADED: list[dict[str, Any]] = []  # every config an environment was loaded with (the tests read it)


class TaskData(BaseModel):
    idx: int | None = None
    prompt: str | None = None


class QAData(TaskData):
    answer: str


class Task:
    def __init__(self, data: QAData, config: Any):
        self.data, self.config = data, config

    @classmethod
    def data_type(cls) -> type[QAData]:
        return QAData

    async def score(self, reply: str) -> tuple[float, dict[str, float]]:  # the rubric: @vf.reward, @vf.metric
        return float(self.data.answer in reply), {"reply_chars": float(len(reply))}


class QATaskset:
    QUESTIONS = [("What is 2 + 2?", "4"), ("What is 3 + 3?", "6"), ("What is 1 + 4?", "5")]

    def __init__(self, config: Any):
        self.config = config

    @classmethod
    def task_type(cls) -> type[Task]:
        return Task

    def __iter__(self):
        for i, (q, a) in enumerate(self.QUESTIONS):
            yield Task(QAData(idx=i, prompt=q, answer=a), self.config.task)


@dataclass
class EvalClientConfig:
    base_url: str
    api_key_var: str = "PRIME_API_KEY"


@dataclass
class SamplingConfig:
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None


@dataclass
class ModelContext:
    model: str
    client: EvalClientConfig
    sampling: SamplingConfig = field(default_factory=SamplingConfig)


@dataclass
class Error:
    type: str
    message: str


@dataclass
class Trace:
    reward: float
    metrics: dict[str, float | None]
    ok: bool = True
    errors: list[Error] = field(default_factory=list)


@dataclass
class Episode:
    ok: bool
    errors: list[Error]
    traces: list[Trace]


class Env:
    def __init__(self, config: Any):
        self.config, self.taskset = config, QATaskset(config.taskset)

    async def run_episode(self, task: Task, ctx: ModelContext) -> Episode:
        if os.environ.get("FAKE_VERIFIERS_HARNESS_FAILS"):  # as verifiers reports a harness that would not start
            return Episode(False, [], [Trace(0.0, {}, ok=False, errors=[Error("HarnessError", "harness setup: "
                                                                                "no uv\n(traceback)")])])
        key = os.environ.get(ctx.client.api_key_var, "EMPTY")
        body = {"model": ctx.model, "messages": [{"role": "user", "content": task.data.prompt}], "stream": True,
                "stream_options": {"include_usage": True},
                **{k: v for k, v in vars(ctx.sampling).items() if v is not None}}
        text, done = "", False
        async with httpx.AsyncClient(timeout=120) as http:
            async with http.stream("POST", f"{ctx.client.base_url}/chat/completions", json=body,
                                   headers={"Authorization": f"Bearer {key}"}) as r:
                if r.status_code != 200:
                    return Episode(False, [Error("ProviderError", f"{r.status_code} {(await r.aread()).decode()}")], [])
                async for line in r.aiter_lines():
                    if line == "data: [DONE]":
                        done = True
                    elif line.startswith("data: "):
                        chunk = json.loads(line[len("data: "):])
                        text += "".join(c["delta"].get("content") or "" for c in chunk["choices"])
        if not done:
            return Episode(False, [Error("ProviderError", "the stream ended without [DONE]")], [])
        reward, metrics = await task.score(text)
        return Episode(True, [], [Trace(reward, {**metrics, "unscored": None})])


def resolve_env_config(config: dict[str, Any]) -> Any:
    taskset = SimpleNamespace(id=config["taskset"]["id"], task=SimpleNamespace())
    return SimpleNamespace(taskset=taskset, agent=config.get("agent", {}), raw=config)


def load_environment(config: Any) -> Env:
    if config.taskset.id != "fake-qa":
        raise ValueError(f"no module exports a Taskset for id {config.taskset.id!r}")
    LOADED.append(config.raw)
    return Env(config)
