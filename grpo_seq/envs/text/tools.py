"""Tool calling as a text environment: TRL's ``tools=`` and ``environment_factory=`` contracts,
played by :class:`~grpo_seq.envs.text.sampler.TextEnvGroupSampler`.

A :class:`ToolEnv` opens with a dataset row's prompt, rendered by the chat template with the
tools' schemas (``apply_chat_template(tools=...)``: each tool is a plain Python function whose
signature and docstring describe it, as transformers reads them). Each reply of the model is
parsed for tool calls in the ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` format
(Qwen2.5/Qwen3, SmolLM3, Hermes) with transformers' ``parse_response``; each call is made and its
result becomes a ``tool`` message, the environment's answer (mask 0). A reply without a tool call
ends the episode, as does one after ``max_tool_calls`` rounds of calls; the dataset's reward
functions then score the whole conversation. As in TRL, a tool that raises answers
``{'error': '<message>'}``, an unknown tool ``{'error': 'Tool <name> not found.'}``, and a result
is sent as ``str(result)``.

``environment_factory`` (TRL's): a class (or any callable) making an object with
``reset(**row)`` (returning None, or a string appended to the prompt's last message), public
methods that are its tools (beside the standalone ``tools``), and optionally ``get_reward()``,
the trajectory's reward. One object per episode, reset at each episode's start.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from typing import Any, Callable, Sequence

import gymnasium as gym
import torch
from torch import nn

from ...math.batch import RolloutBatch
from ...errors import UsageError
from .chat import ChatFormat
from .sampler import TextEnvGroupSampler

__all__ = ["TOOL_CALL_TEMPLATE", "ToolEnv", "ToolEnvSampler", "parse_reply", "call_tool", "environment_tools"]

# transformers' response template (tokenizer.parse_response) for <tool_call>{json}</tool_call> replies.
TOOL_CALL_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor_pattern": r"^",
    "fields": {
        "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True, "content": "json",
                       "transform": {"type": "function", "function": "{content}"}},
        "content": {"content": "text"},
    },
}


def parse_reply(tokenizer: Any, text: str, tools: Sequence[Callable] = ()) -> dict[str, Any]:
    """The reply as an assistant message, with ``tool_calls`` where it calls tools (arguments typed
    by the tools' schemas); a reply that does not parse (a call's JSON cut short) is plain text."""
    try:
        return tokenizer.parse_response(text, schema=TOOL_CALL_TEMPLATE, prefix="", tools=list(tools) or None)
    except Exception:  # malformed tool-call JSON: TRL falls back to the text as it is
        return {"role": "assistant", "content": text}


def call_tool(tools: dict[str, Callable], call: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """One tool call made, as TRL makes it: the ``tool`` message holding ``str(result)``, or
    ``{'error': ...}`` for a tool that raised, an unknown tool or a call that is not a function's;
    and whether it failed so."""
    failed = True
    if call.get("type") != "function":
        name, result = call.get("name", "unknown"), {"error": f"Unsupported tool call type: {call.get('type')}"}
    else:
        name = call["function"].get("name", "unknown")
        try:
            if name not in tools:
                raise ValueError(f"Tool {name} not found.")
            result = tools[name](**(call["function"].get("arguments") or {}))
            if inspect.isawaitable(result):
                result = _wait(result)
            failed = False
        except Exception as e:  # the tool's error is its answer to the model
            result = {"error": str(e)}
    return {"role": "tool", "name": name, "content": str(result)}, failed


async def _awaited(result: Any) -> Any:
    return await result


def _wait(awaitable: Any) -> Any:
    """An async tool's result: on an event loop of its own (a thread's, where one runs here already, as in a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(awaitable))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _awaited(awaitable)).result()


def environment_tools(environment: Any) -> list[Callable]:
    """An environment object's tools: its class's public methods other than ``reset`` and
    ``get_reward`` (listed on the class, so that properties are not evaluated), bound to it."""
    names = [name for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
             if name not in ("reset", "get_reward") and not name.startswith("_")]
    return [getattr(environment, name) for name in names]


def _as_messages(prompt: Any) -> list[dict[str, Any]]:
    return [dict(m) for m in prompt] if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]


class ToolEnv(gym.Env):
    """A text environment in which the model calls ``tools`` (see the module's docstring).

    Args:
        tokenizer: the policy's tokenizer (its ``parse_response`` reads the tool calls).
        rows: the dataset's rows (each with a ``prompt``: a string or chat messages); episode
            ``reset(seed)`` plays row ``seed % len(rows)``.
        tools: plain Python functions (sync or async) the model may call.
        environment: an object made by TRL's ``environment_factory`` (its public methods are tools
            too), or None.
        max_tool_calls: most rounds of tool calls per episode (TRL's ``max_tool_calling_iterations``);
            None: no limit but the token budget.
    """

    def __init__(self, tokenizer: Any, rows: Sequence[dict[str, Any]], tools: Sequence[Callable] = (),
                 environment: Any = None, max_tool_calls: int | None = None):
        if not rows:
            raise UsageError("ToolEnv: no rows to play")
        self.observation_space = self.action_space = gym.spaces.Text(max_length=1 << 20)
        self.tokenizer, self.rows, self.environment, self.max_tool_calls = tokenizer, rows, environment, max_tool_calls
        self.tools = list(tools) + (environment_tools(environment) if environment is not None else [])
        self.by_name = {tool.__name__: tool for tool in self.tools}
        self.row: dict[str, Any] = {}
        self.prompt: list[dict[str, Any]] = []
        self.completion: list[dict[str, Any]] = []
        self.rounds = self.calls = self.failures = 0

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[list[dict[str, Any]], dict]:
        super().reset(seed=seed)
        self.row = dict(self.rows[(seed or 0) % len(self.rows)])
        self.prompt, self.completion = _as_messages(self.row.get("prompt", "")), []
        self.rounds = self.calls = self.failures = 0
        if self.environment is not None:
            said = self.environment.reset(**self.row)
            if isinstance(said, str):  # TRL: appended to the last message before generation
                self.prompt[-1] = {**self.prompt[-1], "content": str(self.prompt[-1]["content"]) + said}
        return self.prompt, {}

    def step(self, reply: str) -> tuple[str, float, bool, bool, dict]:
        message = parse_reply(self.tokenizer, reply, self.tools)
        self.completion.append(message)
        calls = message.get("tool_calls")
        if not calls or (self.max_tool_calls is not None and self.rounds >= self.max_tool_calls):
            return "", 0.0, True, False, {}
        self.rounds += 1
        made = [call_tool(self.by_name, call) for call in calls]
        results = [message for message, _ in made]
        self.calls += len(made)
        self.failures += sum(failed for _, failed in made)
        self.completion += results
        return "\n".join(m["content"] for m in results), 0.0, False, False, {"messages": results}


class ToolEnvSampler(TextEnvGroupSampler):
    """G episodes of a :class:`ToolEnv` per dataset row (a group shares its row), batched as the
    text-env sampler batches them, with TRL's reward-function inputs: ``batch.text.prompts`` the
    prompts' messages, ``completions`` each conversation after its prompt as chat messages (the
    assistant's with ``tool_calls``, the ``tool`` results), ``columns`` the rows' other columns.
    The rewards are the reward functions' (the trainer's ``score_fn``); ``environments`` lists
    each episode's environment object (None without a factory), in the batch's order.

    Args:
        rows, tools, max_tool_calls: as :class:`ToolEnv` takes them.
        environment_factory: makes each episode's environment object (TRL's), or None.
        max_conversation_tokens: most tokens after the prompt (TRL's ``max_completion_length``).
        **kwargs: :class:`TextEnvGroupSampler`'s (``max_turns`` follows from ``max_tool_calls``).
    """

    def __init__(self, tokenizer: Any, rows: Sequence[dict[str, Any]], num_groups: int, num_generations: int,
                 tools: Sequence[Callable] = (), environment_factory: Callable[[], Any] | None = None,
                 max_tool_calls: int | None = None, **kwargs: Any):
        if getattr(tokenizer, "chat_template", None) is None:
            raise UsageError("tools need a chat template that renders them: the tokenizer has none")

        def make() -> ToolEnv:
            return ToolEnv(tokenizer, rows, tools, environment_factory() if environment_factory else None, max_tool_calls)

        turns = max_tool_calls + 1 if max_tool_calls is not None else 1 << 30  # then the token budget ends it
        super().__init__(tokenizer, None, num_groups, num_generations, max_turns=turns, env_fn=make, **kwargs)
        self.format = ChatFormat(tokenizer, kwargs.get("system_prompt", ""), tools=self.envs[0].tools,
                                 instruction=kwargs.get("instruction", ""))
        probe = [{"role": "user", "content": "U"}]
        if self.envs[0].tools and self.format.prompt_text(probe) == ChatFormat(tokenizer).prompt_text(probe):
            raise UsageError("the tokenizer's chat template does not render tools (apply_chat_template(tools=...) "
                             "changes nothing), so the model would never learn of them; use a tool-calling model")
        self.columns = sorted({k for row in rows for k in row if k != "prompt"})

    @property
    def environments(self) -> list[Any]:
        return [env.environment for env in self.envs]

    @torch.no_grad()
    def sample(self, policy: nn.Module) -> RolloutBatch:
        seeds = self.rng.integers(2**31 - 1, size=self.num_groups)
        episodes, clock = self.play(policy, [int(seed) for seed in seeds for _ in range(self.num_generations)])
        batch = self._batch(episodes, clock)
        text, envs = batch.text, self.envs[:len(episodes)]
        text.prompts = [env.prompt for env in envs]
        # what the model saw: a tool result cut by the token budget never reached it (TRL drops it too)
        text.completions = [env.completion[:len(e.messages)] for env, e in zip(envs, episodes)]
        text.columns = {k: [env.row.get(k) for env in envs] for k in self.columns}
        text.check(len(episodes))
        batch.step_rewards = batch.step_index = None  # the reward functions score the whole conversation
        calls = sum(env.calls for env in envs)  # TRL's: calls per conversation, failures per call
        batch.metrics["tools/call_frequency"] = calls / len(envs)
        batch.metrics["tools/failure_frequency"] = sum(env.failures for env in envs) / calls if calls else 0.0
        return batch
