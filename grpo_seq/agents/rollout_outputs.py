"""Completions made by the caller's function instead of the policy's ``generate``: TRL's ``rollout_func``.

``rollout_func(prompts, trainer) -> dict`` gets a step's prompts on this process, each once, as
the dataset holds them (chat messages stay messages: the function renders them), and returns G
completions per prompt, prompt by prompt:

- ``prompt_ids``: each completion's prompt ids (one list per completion; one per prompt is
  repeated over its G completions);
- ``completion_ids``: each completion's ids, as sampled;
- ``logprobs``: each completion id's log-prob under the distribution it was drawn from;
- ``env_mask`` (optional): 1 on the model's ids, 0 on ids the environment inserted (a tool's
  result): those are context, never trained;
- any other key: a list with one value per completion (or one value for all), handed to the
  reward functions as a keyword argument beside the dataset's columns.

The ids are what is trained: no re-tokenisation. The step's rewards are the reward functions'
(the loop's scorer) on the completions decoded from these ids.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch
from torch import nn

from ..envs.text.sampler import Episode, episode_tensors
from ..errors import UsageError
from ..math.batch import RolloutBatch, TextSamples
from ..sampling.lm import LMGroupSampler

__all__ = ["RolloutOutputSampler", "REQUIRED"]

REQUIRED = ("prompt_ids", "completion_ids", "logprobs")


class RolloutOutputSampler(LMGroupSampler):
    """:class:`LMGroupSampler`'s prompts (order, shuffling, checkpointed position), completed by
    ``rollout_func(prompts, owner)`` instead of the policy."""

    def __init__(self, *args: Any, rollout_func: Callable[..., Any], owner: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rollout_func, self.owner = rollout_func, owner

    @torch.no_grad()
    def sample(self, policy: nn.Module) -> RolloutBatch:
        rows = [self.dataset[i] for i in self._next_indices()]
        prompts = [row[self.prompt_column] for row in rows]
        out = self.rollout_func(copy.deepcopy(prompts), self.owner)
        n = len(rows) * self.num_generations
        fields = _checked(out, len(rows), n)
        prompt_ids = fields["prompt_ids"]
        if len(prompt_ids) == len(rows):
            prompt_ids = [p for p in prompt_ids for _ in range(self.num_generations)]
        masks = fields.get("env_mask") or [[1] * len(ids) for ids in fields["completion_ids"]]
        episodes = [_episode(prompts[k // self.num_generations], list(p), list(ids), list(lps), list(m))
                    for k, (p, ids, lps, m) in enumerate(zip(prompt_ids, fields["completion_ids"], fields["logprobs"],
                                                            masks))]
        extra = {k: (v if isinstance(v, list) else [v] * n) for k, v in fields.items() if k not in (*REQUIRED, "env_mask")}
        return self._batch(rows, prompts, episodes, extra)

    def _batch(self, rows: list[dict[str, Any]], prompts: list[Any], episodes: list[Episode],
               extra: dict[str, list[Any]]) -> RolloutBatch:
        G, tok = self.num_generations, self.tokenizer
        t = episode_tensors(episodes, tok.pad_token_id)
        mask = t["mask"]
        texts = tok.batch_decode([e.ids for e in episodes], skip_special_tokens=True)
        chat = not isinstance(prompts[0], str)
        columns = {k: [row[k] for row in rows for _ in range(G)] for k in rows[0] if k != self.prompt_column}
        clash = sorted(set(columns) & set(extra))
        if clash:
            raise UsageError(f"rollout_func: returned {clash}, which the dataset has as columns too")
        return RolloutBatch(
            context=t["context"], tokens=t["tokens"], mask=mask, num_generations=G,
            group=torch.arange(len(rows)).repeat_interleave(G), rewards=torch.zeros(len(episodes)),
            prompt_mask=t["prompt_mask"], temperature=self.sampling["temperature"],
            truncated=torch.tensor([e.truncated for e in episodes]),
            sampler_logp=torch.where(mask, t["logp"], torch.zeros_like(t["logp"])),
            text=TextSamples(prompts=[e.prompt for e in episodes],
                             prompt_texts=[tok.decode(e.prompt_ids, skip_special_tokens=False) for e in episodes],
                             completions=[[{"role": "assistant", "content": c}] for c in texts] if chat else texts,
                             completion_texts=texts, completion_ids=[e.ids for e in episodes],
                             columns={**columns, **extra}),
        )


def _checked(out: Any, prompts: int, completions: int) -> dict[str, Any]:
    """``out`` if it is what ``rollout_func`` must return, else UsageError naming what is wrong."""
    if not isinstance(out, dict):
        raise UsageError(f"rollout_func: must return a dict with {list(REQUIRED)}, got {type(out).__name__}")
    missing = [k for k in REQUIRED if k not in out]
    if missing:
        raise UsageError(f"rollout_func must return keys {missing} in its output dict")
    ids = out["completion_ids"]
    if len(ids) != completions:
        raise UsageError(f"rollout_func: returned {len(ids)} completions for {prompts} prompts; it must return "
                         f"num_generations per prompt, {completions} in all, prompt by prompt")
    if len(out["prompt_ids"]) not in (prompts, completions):
        raise UsageError(f"rollout_func: prompt_ids holds {len(out['prompt_ids'])} lists; give one per completion "
                         f"({completions}) or one per prompt ({prompts})")
    for name in ("logprobs", "env_mask"):
        for i, (row, got) in enumerate(zip(ids, out.get(name) or [])):
            if len(got) != len(row):
                raise UsageError(f"rollout_func: {name}[{i}] holds {len(got)} values for completion_ids[{i}]'s "
                                 f"{len(row)} ids")
    for key, value in out.items():
        if key not in (*REQUIRED, "env_mask") and isinstance(value, list) and len(value) != completions:
            raise UsageError(f"rollout_func: {key!r} holds {len(value)} values; give one per completion ({completions})")
    if not all(ids):
        raise UsageError("rollout_func: a completion holds no ids")
    return out


def _episode(prompt: Any, prompt_ids: list[int], ids: list[int], logprobs: list[float], mask: list[int]) -> Episode:
    """One completion: runs of the model's ids (trained, turn 0, 1, ...) between the environment's."""
    e = Episode(prompt=prompt, prompt_ids=prompt_ids)
    turn, start = 0, 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or bool(mask[i]) != bool(mask[start]):
            e.add(ids[start:i], turn if mask[start] else -1, [float(x) for x in logprobs[start:i]])
            turn += int(bool(mask[start]))
            start = i
    e.end(truncated=False)
    return e
