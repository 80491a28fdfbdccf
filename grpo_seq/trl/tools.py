"""TRL's ``tools=`` and ``environment_factory=`` through the door: the text-environment sampler
playing :class:`grpo_seq.envs.text.tools.ToolEnv` in place of the prompt sampler, and an
environment's ``get_reward`` as one more reward function (TRL's weight 1, its class's name)."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

from ..agents.rollout_outputs import RolloutOutputSampler
from ..envs.text.tools import ToolEnvSampler
from ..errors import UsageError

__all__ = ["placeholder_rows", "tool_sampler", "with_environment_reward"]


def placeholder_rows(train_dataset: Any, environment_factory: Any, args: Any) -> Any:
    """``train_dataset``, or, as TRL makes it for an environment that owns the data (its ``reset``
    returns the prompt), one generation batch of empty prompts, cycled for ``max_steps``."""
    if train_dataset is not None:
        return train_dataset
    if environment_factory is None:
        raise UsageError("GRPOTrainer: `train_dataset` is required unless an `environment_factory` is provided "
                         "(rows with a 'prompt' column)")
    if isinstance(environment_factory, dict):
        raise UsageError("GRPOTrainer: A `dict` `environment_factory` (multiple environments) requires a `train_dataset` "
                         "with an `environment` column, and several environments are not in grpo-seq: give one factory")
    if args.max_steps <= 0:
        raise UsageError("GRPOTrainer: When training without a `train_dataset` (the environment owns the data and "
                         "returns the prompt from `reset()`), `max_steps` must be set to a positive value to define "
                         "the training length. Set it via `GRPOConfig(max_steps=...)`.")
    return [{"prompt": [{"role": "user", "content": ""}]}] * (args.generation_batch_size // args.num_generations)


def with_environment_reward(environment_factory: Any, reward_funcs: Any, reward_processing_classes: Any,
                            reward_weights: Sequence[float] | None) -> tuple[list, Any, list[float] | None]:
    """``(reward_funcs, reward_processing_classes, reward_weights)`` with, as TRL adds it, the
    environment's ``get_reward`` as a last reward function where its class defines one (named after
    the class, weight 1). An environment without a callable ``reset`` is refused, as TRL refuses it."""
    fns = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs] if reward_funcs else []
    if environment_factory is None:
        return fns, reward_processing_classes, reward_weights
    if isinstance(environment_factory, dict):
        raise UsageError("GRPOTrainer: environment_factory as a dict of environments (TRL's multi-environment routing) "
                         "is not in grpo-seq; give one factory")
    env_type = type(environment_factory())  # a probe, as TRL makes one
    if not callable(getattr(env_type, "reset", None)):
        raise UsageError("GRPOTrainer: Each environment instance returned by `environment_factory` must define a "
                         "callable `reset`.")
    if not inspect.isfunction(getattr(env_type, "get_reward", None)):
        return fns, reward_processing_classes, reward_weights
    fns.append(_get_reward(env_type))
    if reward_processing_classes is not None:
        classes = list(reward_processing_classes) if isinstance(reward_processing_classes, (list, tuple)) else [
            reward_processing_classes]
        reward_processing_classes = [*classes, None]
    weights = None if reward_weights is None else [*map(float, reward_weights), 1.0]
    return fns, reward_processing_classes, weights


def _get_reward(env_type: type) -> Callable:
    """TRL's reward function over ``environments``: each one's ``get_reward()`` (None for another class)."""

    def get_reward(environments: Sequence[Any], **kwargs: Any) -> list[float | None]:
        return [e.get_reward() if type(e) is env_type else None for e in environments]

    get_reward.__name__ = get_reward.__qualname__ = env_type.__name__
    return get_reward


def rollout_func_sampler(cfg: Any, rows: Sequence[dict], model: Any, tokenizer: Any, accelerator: Any,
                         rollout_func: Callable[..., Any], owner: Any) -> RolloutOutputSampler:
    """The sampler of the LM job ``cfg`` whose completions ``rollout_func(prompts, owner)`` makes
    (TRL's ``rollout_func``: :mod:`grpo_seq.agents.rollout_outputs`)."""
    return RolloutOutputSampler(
        tokenizer, rows, cfg.num_groups, cfg.num_generations, cfg.max_completion_length, temperature=cfg.temperature,
        top_p=cfg.top_p, top_k=cfg.top_k, seed=cfg.seed, shuffle=cfg.shuffle_prompts,
        process_index=accelerator.process_index, num_processes=accelerator.num_processes,
        rollout_func=rollout_func, owner=owner)


def tool_sampler(cfg: Any, rows: Sequence[dict], model: Any, tokenizer: Any, accelerator: Any, tools: Sequence[Callable],
                 environment_factory: Callable | None, max_tool_calling_iterations: int | None) -> ToolEnvSampler:
    """The sampler of the LM job ``cfg`` with tools: its groups, sampling and seed; each
    conversation after its prompt at most ``max_completion_length`` tokens (TRL's budget, tool
    results included), each reply too, the whole within the model's context."""
    context = getattr(getattr(model, "config", None), "max_position_embeddings", None) or 1 << 30
    return ToolEnvSampler(
        tokenizer, rows, cfg.num_groups, cfg.num_generations, tools=tools, environment_factory=environment_factory,
        max_tool_calls=max_tool_calling_iterations, max_reply_tokens=cfg.max_completion_length,
        max_total_tokens=context, max_conversation_tokens=cfg.max_completion_length, temperature=cfg.temperature,
        top_p=cfg.top_p, top_k=cfg.top_k, seed=cfg.seed, process_index=accelerator.process_index,
        sampler_logprobs=cfg.sampler_correction is not None,
    )
