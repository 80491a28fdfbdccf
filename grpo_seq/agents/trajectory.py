"""An agent's calls to the endpoint, as sequences, as the one batch type.

A rollout's trajectory is every chat completion it asked the endpoint for, in order, each with the
prompt and completion token ids exactly as sampled and the completion's sampled log-probs
(:class:`Call`). Training needs sequences: a context, then tokens of which the model's are trained.

- A call whose prompt ids begin with an earlier call's prompt + completion ids continues that
  call's sequence (:func:`split_sequences`): the tokens between the two calls (the template's
  glue, a tool's result, the user's next turn) join the sequence with mask 0, the new completion
  with mask 1. The endpoint builds a continuing prompt by appending ids to the sampled ones
  (:mod:`grpo_seq.agents.prompts`), so the ids trained are the ids sampled: no re-tokenisation.
- A call that extends no earlier one (the harness rewrote its history: a summary, a dropped turn)
  starts a new sequence. Each sequence carries the rollout's reward; the first is the rollout's
  row of the batch, the others ride along in ``RolloutBatch.extra`` and share its advantage.

The batch is a text environment's (:mod:`grpo_seq.envs.text.sampler`, whose :class:`Episode`
records a sequence here too): the first call's prompt as the context, every later token as the
completion, each call's reply a turn (``step_index``) with its reward on its last token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from ..envs.text.sampler import Episode, episode_tensors
from ..math.batch import RolloutBatch, TextSamples

__all__ = ["Call", "Trajectory", "split_sequences", "as_episode", "episodes_batch"]


@dataclass
class Call:
    """One choice of one chat completion, as the endpoint sampled it.

    Attributes:
        prompt_ids: the ids the model was conditioned on.
        completion_ids: the ids it sampled, up to and including its end-of-turn token when it
            ended (``ended``), else cut at the call's ``max_tokens``.
        logprobs: each completion id's log-prob under the distribution it was drawn from (float32).
        messages: the request's messages (its ``tools`` went into the prompt too).
        reply: the assistant message the endpoint returned for this choice.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    messages: list[dict[str, Any]]
    reply: dict[str, Any]
    ended: bool

    @property
    def ids(self) -> list[int]:
        """Prompt then completion: what a continuing call's prompt begins with."""
        return self.prompt_ids + self.completion_ids


@dataclass
class Trajectory:
    """What one rollout asked of the endpoint: its calls in the order they were answered."""

    rollout_id: str
    calls: list[Call] = field(default_factory=list)
    open: bool = True  # closed when the rollout ends: later calls are refused


def split_sequences(calls: Sequence[Call]) -> list[list[Call]]:
    """``calls`` in order, cut into sequences: a call joins the latest sequence whose last call's
    prompt + completion its prompt ids begin with, else starts a sequence of its own."""
    sequences: list[list[Call]] = []
    for call in calls:
        for seq in reversed(sequences):
            before = seq[-1].ids
            if len(call.prompt_ids) >= len(before) and call.prompt_ids[:len(before)] == before:
                seq.append(call)
                break
        else:
            sequences.append([call])
    return sequences


def as_episode(calls: Sequence[Call], reward: float, call_rewards: Sequence[float] | None = None) -> Episode:
    """One sequence as a text environment's :class:`Episode`: the first prompt, then each call's
    new prompt tokens (mask 0) and completion (mask 1, turn ``k``), ``call_rewards[k]`` on call
    ``k``'s last token (else ``reward`` on the last call's), ``reward`` as the episode's total."""
    first = calls[0]
    e = Episode(prompt=first.messages, prompt_ids=list(first.prompt_ids))
    seen = len(first.messages)
    for k, call in enumerate(calls):
        if k:
            e.add(call.prompt_ids[e.length:], -1)
            e.messages += [{**m, "trained": False} for m in call.messages[seen + 1:]]
            seen = len(call.messages)
        e.add(list(call.completion_ids), k, list(call.logprobs))
        e.messages.append({**call.reply, "trained": True})
        if call_rewards is not None:
            e.token_rewards[-1] += float(call_rewards[k])
    if call_rewards is None:
        e.token_rewards[-1] += float(reward)
    e.total, e.turns = float(reward), len(calls)
    e.end(truncated=not calls[-1].ended)
    return e


def episodes_batch(episodes: Sequence[Episode], num_generations: int, tokenizer: Any, temperature: float,
                   metrics: dict[str, float] | None = None, partial: bool = False) -> RolloutBatch:
    """The batch of ``episodes`` (laid out group by group), as the text-environment sampler lays
    out its own: left-padded prompts as the context, right-padded conversations as the tokens,
    the replies' tokens masked in with their turns, rewards and sampled log-probs."""
    t = episode_tensors(episodes, tokenizer.pad_token_id)
    mask = t["mask"]
    texts = TextSamples(
        prompts=[e.prompt for e in episodes],
        prompt_texts=[tokenizer.decode(e.prompt_ids, skip_special_tokens=False) for e in episodes],
        completions=[e.messages for e in episodes],
        completion_texts=[tokenizer.decode(e.ids, skip_special_tokens=True) for e in episodes],
        completion_ids=[[t for t, keep in zip(e.ids, e.trained) if keep] for e in episodes],
    )
    return RolloutBatch(
        context=t["context"], tokens=t["tokens"], mask=mask, num_generations=num_generations,
        group=(torch.zeros(len(episodes), dtype=torch.long) if partial  # no groups: a batch's more sequences
               else torch.arange(len(episodes) // num_generations).repeat_interleave(num_generations)),
        rewards=torch.tensor([e.total for e in episodes]), step_rewards=t["step_rewards"], step_index=t["step_index"],
        prompt_mask=t["prompt_mask"], temperature=temperature, text=texts,
        truncated=torch.tensor([e.truncated for e in episodes]),
        sampler_logp=torch.where(mask, t["logp"], torch.zeros_like(t["logp"])), metrics=dict(metrics or {}),
        partial=partial,
    )
