"""The one batch type that flows through the loop, for text and environment rollouts alike."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

__all__ = ["RolloutBatch", "TextSamples"]


@dataclass
class TextSamples:
    """The text side of a language-model batch: Python lists with one entry per output.

    Attributes:
        prompts: each output's prompt as the dataset gave it (a str, or a list of chat
            messages); what reward functions receive as ``prompts``.
        prompt_texts: the prompts as rendered for the model (chat template applied).
        completions: what reward functions receive as ``completions``: the decoded text, or
            ``[{"role": "assistant", "content": text}]`` for chat prompts.
        completion_texts: the decoded completions (up to the first EOS, special tokens dropped).
        completion_ids: the completions' token ids (up to and including the first EOS).
        columns: the dataset's other columns, each a list with one value per output (the
            reward functions' keyword arguments, e.g. ``answer``).
    """

    prompts: list[Any]
    prompt_texts: list[str]
    completions: list[Any]
    completion_texts: list[str]
    completion_ids: list[list[int]]
    columns: dict[str, list[Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.prompts)

    def check(self, n: int) -> None:
        """Raise ``ValueError`` unless every list holds ``n`` entries."""
        lists = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "columns"}
        lists.update({f"columns[{k!r}]": v for k, v in self.columns.items()})
        for name, values in lists.items():
            if len(values) != n:
                raise ValueError(f"TextSamples.{name} has {len(values)} entries for a batch of {n} outputs")

    def select(self, index: list[int]) -> "TextSamples":
        """The entries at ``index``, in that order."""
        pick = lambda values: [values[i] for i in index]  # noqa: E731
        return TextSamples(
            prompts=pick(self.prompts), prompt_texts=pick(self.prompt_texts), completions=pick(self.completions),
            completion_texts=pick(self.completion_texts), completion_ids=pick(self.completion_ids),
            columns={k: pick(v) for k, v in self.columns.items()},
        )


# Fields holding one row per output: checked against the batch size, sliced by select().
_PER_OUTPUT = ("context", "mask", "group", "rewards", "step_rewards", "old_logp", "ref_logp", "advantages",
               "prompt_mask", "truncated", "reward_components", "sampler_logp", "step_index", "step_anchor")
# Of those, the ones laid out (B, T) like tokens.
_PER_TOKEN = ("mask", "step_rewards", "old_logp", "ref_logp", "advantages", "sampler_logp", "step_index", "step_anchor")


@dataclass
class RolloutBatch:
    """B = num_groups * G sampled outputs, laid out group by group (members of group g are
    rows ``g*G .. g*G+G-1``); T is the longest completion in the batch.

    The trainer reads only ``tokens``, ``mask``, the rewards and ``group``; the policy that
    scores the batch reads ``context`` (and, for text, ``prompt_mask`` and ``temperature``), so
    the same trainer trains text or actions. Every field is checked on construction: tensors
    with one row per output must have B rows, per-token tensors the shape of ``tokens``.

    Attributes:
        context: what the policy conditions on. Env rollouts: observations ``(B, T, obs_dim)``,
            the context of action t being observation t. Text: prompt ids ``(B, P)``.
        tokens: ``(B, T)`` long, the tokens (actions) the policy chose.
        mask: ``(B, T)`` bool, True where a token belongs to the output; padding, post-EOS
            and post-termination positions are False and never count.
        group: ``(B,)`` long, index of the group (prompt or start state) of each output.
        num_generations: G, outputs per group.
        rewards: ``(B,)`` outcome reward of each output.
        step_rewards: ``(B, T)`` reward of each step, for process supervision, or None.
        old_logp: ``(B, T)`` log-probs under the sampling policy (kept for mu > 1), or None; NaN
            on outputs the trainer skips (zero advantage with beta = 0: never trained).
        ref_logp: ``(B, T)`` log-probs under the reference policy (for beta > 0), or None.
        advantages: ``(B, T)`` per-token advantages once computed, or None.
        prompt_mask: text: ``(B, P)`` attention mask of the left-padded prompt ids, or None.
        temperature: text: the sampling temperature; the policy scores tokens under the
            distribution they were drawn from.
        text: text: prompts, completions and dataset columns as Python lists, or None.
        truncated: text: ``(B,)`` bool, True where a completion hit the length limit before EOS.
        reward_components: ``(B, n_fns)`` each reward function's unweighted value (NaN where it
            returned None), filled by :class:`grpo_seq.scoring.rewards.RewardScorer`, or None.
        sampler_logp: ``(B, T)`` float32 log-probs of the tokens under the distribution that drew
            them (the sampler's processed logits: a cheaper copy's, ``sampling_dtype``), 0 outside
            the mask, or None; the trainer's importance weights correct for it.
        step_index: ``(B, T)`` long, the env step each token belongs to where a step spans several
            tokens (a text environment's turn: its reply's tokens), -1 outside the mask; its
            ``step_rewards`` sit on each step's last token. None where every token is a step.
        step_anchor: ``(B, T)`` long where ``step_index`` is set: an id of the observation each
            token's step answers (a text environment's prompt, then its answers), equal ids for
            equal observations across the batch, -1 outside the mask; GiGPO's anchor states
            (``LoopConfig.step_advantage_w``). None: an env rollout's anchors are its observations.
        metrics: the sampler's and reward functions' own figures for this batch (name -> value),
            logged by the trainer with its own.
        partial: True for a minibatch made by :meth:`select`, which need not hold whole groups.
        extra: more sequences of the batch's outputs, trained beside them, or None: an agent whose
            harness rewrote its history made several sequences in one rollout (the first is the
            output's row). Each takes the advantage of the output ``extra_of`` names; the loss
            counts it as an output of its own.
        extra_of: ``(E,)`` long, the row of this batch each row of ``extra`` belongs to.
    """

    context: Tensor
    tokens: Tensor
    mask: Tensor
    group: Tensor
    num_generations: int
    rewards: Tensor
    step_rewards: Tensor | None = None
    old_logp: Tensor | None = None
    ref_logp: Tensor | None = None
    advantages: Tensor | None = None
    prompt_mask: Tensor | None = None
    temperature: float = 1.0
    text: TextSamples | None = None
    truncated: Tensor | None = None
    reward_components: Tensor | None = None
    sampler_logp: Tensor | None = None
    step_index: Tensor | None = None
    step_anchor: Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    partial: bool = False
    extra: "RolloutBatch | None" = None
    extra_of: Tensor | None = None

    def __post_init__(self) -> None:
        if self.tokens.dim() != 2:
            raise ValueError(f"tokens must be shaped (B, T), got {tuple(self.tokens.shape)}")
        b = self.tokens.shape[0]
        for name in _PER_OUTPUT:
            value = getattr(self, name)
            if value is None:
                continue
            want = tuple(self.tokens.shape) if name in _PER_TOKEN else (b,)
            got = tuple(value.shape) if name in _PER_TOKEN else tuple(value.shape[:1])
            if got != want:
                raise ValueError(f"RolloutBatch.{name} is shaped {tuple(value.shape)}; expected {want} "
                                 f"{'(the shape of tokens)' if name in _PER_TOKEN else '(one row per output)'}")
        if self.text is not None:
            self.text.check(b)
        if self.num_generations < 2:
            raise ValueError(f"num_generations must be >= 2 to compare outputs, got {self.num_generations}")
        if not self.partial and b % self.num_generations:
            raise ValueError(f"batch of {b} outputs is not divisible by num_generations {self.num_generations}")

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def num_groups(self) -> int:
        return self.batch_size // self.num_generations

    @property
    def num_tokens(self) -> int:
        return int(self.mask.sum())

    def lengths(self) -> Tensor:
        return self.mask.sum(-1)

    def select(self, index: Tensor) -> "RolloutBatch":
        """Rows ``index`` of every per-output field (a minibatch, marked ``partial``: the group
        layout is not kept); the result is checked like any other batch."""
        rows = {name: getattr(self, name)[index] for name in (*_PER_OUTPUT, "tokens") if getattr(self, name) is not None}
        text = self.text.select(index.tolist()) if self.text is not None else None
        return dataclasses.replace(self, **rows, text=text, partial=True, extra=None, extra_of=None)

    @property
    def one_observation_per_token(self) -> bool:
        """An env rollout whose every token has an observation of its own (no prompt, no step of
        several tokens): what :meth:`steps` can cut."""
        return self.context.dim() == 3 and self.prompt_mask is None and self.step_index is None and self.text is None

    def steps(self, where: Tensor) -> "RolloutBatch":
        """The tokens at ``where`` (``(k, 2)``: row and position of each) as ``k`` outputs of one
        token each, with their output's per-output fields, marked ``partial``: a minibatch of env
        steps for a policy that scores each token from its own context alone. Only env rollouts
        (an observation per token, no prompt, one token per step) can be cut so."""
        if not self.one_observation_per_token:
            raise ValueError("RolloutBatch.steps: only an env rollout, with one observation per token, splits into steps")
        r, t = where[:, 0], where[:, 1]
        per_token = (*_PER_TOKEN, "tokens", "context")
        picked = {name: getattr(self, name)[r, t].unsqueeze(1) if name in per_token else getattr(self, name)[r]
                  for name in (*_PER_OUTPUT, "tokens") if getattr(self, name) is not None}
        return dataclasses.replace(self, **picked, partial=True)

    def to(self, device: torch.device | str) -> "RolloutBatch":
        if self.tokens.device == torch.device(device):
            return self
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), (Tensor, RolloutBatch))}
        return dataclasses.replace(self, **moved)
