"""A Hugging Face causal language model as a GRPO policy: completion tokens are its tokens."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..math.batch import RolloutBatch
from ..generation import LLAMA_LIKE_MODEL_TYPES, sample_tokens, unsupported_reason, unwrap_peft
from ..generation.sampling_copy import SamplingCopy
from ..generation.support import cache_kwargs, output_cache
from .head_logprobs import head_logprobs
from ..math.objective import token_entropy, token_logprobs

__all__ = ["CausalLMPolicy"]

_ENTROPY_ROWS = 256  # positions per checkpointed chunk of an entropy with a gradient


class CausalLMPolicy(nn.Module):
    """Scores the completion tokens of a :class:`RolloutBatch` under a causal LM.

    The batch's ``context`` holds left-padded prompt ids with ``prompt_mask``;
    ``tokens`` holds the right-padded completions. Only the completion positions go through
    the LM head, so full-vocabulary logits are never built for the prompt; for Llama and Qwen2
    the head, log-softmax and gather run fused (:func:`grpo_seq.policies.head_logprobs.head_logprobs`).

    Args:
        model: a ``transformers`` causal LM, or a peft model wrapping one (LoRA): then the
            reference policy is this same model with its adapters disabled.
        tokenizer: saved beside the weights so a saved policy loads on its own.
        share_prompt: run each distinct prompt of a batch once, its completions attending to
            that one pass (same log-probs and gradients, less compute); False scores every row
            as one whole sequence.
        cast_for_generation: under autocast to a 16-bit dtype, generate from a copy of the
            weights in that dtype, re-cast once per generate call. Autocast
            would re-cast every weight at every decoding step, which costs as much as the
            16-bit arithmetic saves; the matrix products see the same 16-bit weights either way.
        fast_generation: sample with :func:`grpo_seq.generation.sample_tokens` (in-place KV
            cache, one prefill per prompt, a lean decoding loop) where it supports the model and
            options, else with ``model.generate``; False always uses ``model.generate``.
        sampling_dtype: float32 samples from the trained weights (or, under 16-bit autocast,
            their 16-bit copy); bfloat16 or int8 from a cheaper copy refreshed before every
            generate call (:class:`grpo_seq.generation.sampling_copy.SamplingCopy`).
    """

    def __init__(self, model: nn.Module, tokenizer=None, share_prompt: bool = True, cast_for_generation: bool = True,
                 fast_generation: bool = True, sampling_dtype: str = "float32"):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.share_prompt = share_prompt
        self.cast_for_generation = cast_for_generation
        self.fast_generation = fast_generation
        self._cast: tuple[nn.Module, torch.dtype] | None = None  # (16-bit copy, its dtype)
        self.sampling_dtype = sampling_dtype
        self._sampling_copy = SamplingCopy(sampling_dtype)
        # False: the entropy is a statistic (no graph, the fused head where the model allows);
        # the trainer sets it True when its objective carries an entropy term.
        self.entropy_has_grad = False

    def enable_entropy_grad(self) -> None:
        """From now on :meth:`forward` gives the entropy with a gradient, from the same logits as
        the log-probs (the fused head then gives way to the head's logits of the scored tokens)."""
        self.entropy_has_grad = True

    @property
    def has_adapters(self) -> bool:
        """True for a peft model: its reference is itself with the adapters disabled."""
        return hasattr(self.model, "disable_adapter") and hasattr(self.model, "peft_config")

    @contextlib.contextmanager
    def adapters_disabled(self) -> Iterator[None]:
        if not self.has_adapters:
            raise RuntimeError("adapters_disabled() needs a peft model; this policy has no adapters")
        with self.model.disable_adapter():
            yield

    def forward(self, batch: RolloutBatch, with_entropy: bool = True) -> tuple[Tensor, Tensor | None]:
        """Per-token log-probs (and entropies, when asked) ``(B, T)`` of the completion tokens,
        under the distribution they were sampled from: logits divided by
        ``batch.temperature``. Scoring at temperature 1 tokens drawn
        at 0.7 would follow the gradient of another distribution than the one sampled.

        Columns that are padding in every row of this batch (prompt on the left, completion on
        the right) are cut before the forward pass, which matters for micro-batches; the
        outputs are padded back to ``T`` with zeros, which the mask excludes. Other positions
        outside the mask hold 0 too with the fused head (it scores only the masked tokens).
        The entropy is detached unless :meth:`enable_entropy_grad` was called and autograd is on.
        """
        prompt, prompt_mask = batch.context, batch.prompt_mask
        if prompt_mask is None:
            raise ValueError("CausalLMPolicy scores text batches: batch.prompt_mask is None (was it made by LMGroupSampler?)")
        tokens, mask = batch.tokens, batch.mask
        B, T = tokens.shape
        keep = prompt_mask.any(0).nonzero()
        p0 = int(keep[0]) if len(keep) else prompt.shape[1]
        used = mask.any(0).nonzero()
        t_eff = int(used[-1]) + 1 if len(used) else 1
        prompt, prompt_mask, tokens = prompt[:, p0:], prompt_mask[:, p0:], tokens[:, :t_eff]

        share = self._shared_rows(batch.group, prompt)
        fused = self._body_and_head()
        # An entropy with a gradient comes from the head's logits (the fused head's is detached).
        grad_entropy = with_entropy and self.entropy_has_grad and torch.is_grad_enabled()
        run = self.model if fused is None else fused[0]
        if share is not None:
            out = prefix_shared_pass(run, prompt, prompt_mask, tokens, *share, logits=fused is None)
        else:
            out = full_pass(run, prompt, prompt_mask, tokens, logits=fused is None)
        # The distribution the tokens were drawn from: the sampler's temperature scales the logits.
        temperature = float(batch.temperature)
        if fused is not None:
            # Only the completion tokens go through the head: padding after an EOS would cost
            # the largest product of the pass and its logits' walks for nothing the mask keeps.
            head, scored = fused[1], mask[:, :t_eff]
            if grad_entropy:
                lp, ent = _logprobs_and_entropy(head(out[scored]), tokens[scored], temperature)
            else:
                lp, ent = head_logprobs(out[scored], head.weight, tokens[scored], head.bias, with_entropy, temperature)
            logp = lp.new_zeros(scored.shape).index_put((scored,), lp)
            entropy = ent.new_zeros(scored.shape).index_put((scored,), ent) if with_entropy else None
        elif grad_entropy:
            logp, entropy = _logprobs_and_entropy(out, tokens, temperature)
        else:
            if temperature != 1.0:
                out = out.float() / temperature
            logp = token_logprobs(out, tokens)
            entropy = None
            if with_entropy:
                with torch.no_grad():
                    entropy = torch.cat([token_entropy(chunk) for chunk in out.detach().split(8, dim=1)], dim=1)
        pad = T - t_eff
        if pad:
            logp = nn.functional.pad(logp, (0, pad))
            entropy = nn.functional.pad(entropy, (0, pad)) if entropy is not None else None
        return logp, entropy

    def _body_and_head(self) -> tuple[nn.Module, nn.Linear] | None:
        """``(decoder body, lm_head)`` where the logits are exactly ``lm_head(body(...))``: the
        log-probs then come from :func:`head_logprobs`, without a full logits tensor; None for
        other models (they go through their own forward). A peft model's body carries its
        adapters, as in generation."""
        lm = unwrap_peft(self.model)
        head = getattr(lm, "lm_head", None)
        body = getattr(lm, "model", None)
        if getattr(lm.config, "model_type", None) not in LLAMA_LIKE_MODEL_TYPES or type(head) is not nn.Linear or body is None:
            return None
        return body, head

    @property
    def _checkpointing(self) -> bool:
        for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # newer name first
            if hasattr(type(self.model), name) or hasattr(getattr(self.model, "base_model", None), name):
                return bool(getattr(self.model, name))
        return False

    def _shared_rows(self, group: Tensor | None, prompt: Tensor) -> tuple[Tensor, Tensor] | None:
        """``(first, inverse)`` when rows repeat prompts: ``prompt[first]`` are the distinct
        prompts and ``prompt[first][inverse] == prompt``; None when sharing would not pay or work."""
        if not self.share_prompt or group is None or self._checkpointing:
            return None  # checkpointed layers run without a cache, which the shared pass needs
        ids, inverse = torch.unique(group, return_inverse=True)
        if len(ids) == len(group):
            return None
        rows = torch.arange(len(group), device=group.device)
        first = torch.full((len(ids),), len(group), device=group.device).scatter_reduce(0, inverse, rows, "amin")
        if not torch.equal(prompt[first][inverse], prompt):
            return None  # a group label that does not mean "same prompt": score rows apart
        return first, inverse

    def _generation_model(self) -> nn.Module:
        """The model to sample from: itself, or under 16-bit autocast its 16-bit copy, re-cast
        from the current weights at every call (one pass over the weights, small beside sampling;
        tensor version counters would miss updates made by fused optimizer kernels). A
        ``sampling_dtype`` other than float32 samples from that copy, refreshed the same way."""
        if self.sampling_dtype != "float32":
            return self._sampling_copy.refresh(self.model)
        device = next(self.model.parameters()).device
        if not (self.cast_for_generation and torch.is_autocast_enabled(device.type)):
            return self.model
        dtype = torch.get_autocast_dtype(device.type)
        if dtype not in (torch.bfloat16, torch.float16):
            return self.model
        if self._cast is None or self._cast[1] != dtype:
            self._cast = (copy.deepcopy(self.model).to(dtype).requires_grad_(False).eval(), dtype)
        cast = self._cast[0]
        with torch.no_grad():
            for c, p in zip(cast.parameters(), self.model.parameters()):
                c.copy_(p)
        return cast

    @torch.no_grad()
    def generate(self, input_ids: Tensor, attention_mask: Tensor, num_return_sequences: int = 1,
                 **generation_kwargs) -> Tensor | tuple[Tensor, Tensor]:
        """``model.generate`` (prompt followed by the new tokens), ``num_return_sequences`` per prompt.

        With ``fast_generation`` (the default) this is :func:`grpo_seq.generation.sample_tokens`
        where it supports the model and options (see ``unsupported_reason``); it always runs
        each prompt once; ``on_token(t)`` then hears each new position, and ``output_logprobs=True``
        returns ``(sequences, logprobs)``: the float32 log-probs of the chosen tokens under the
        sampled (processed) distribution, ``(B * G, new tokens)``. Otherwise ``model.generate``
        (which gives no log-probs): with ``share_prompt``, each prompt but its last token is run
        once and its cache copied to its ``num_return_sequences`` rows: the same samples, a G-th
        of the prompt's cost.
        """
        device = next(self.model.parameters()).device
        # A cheaper copy samples in its own precision: autocast would hand its int8 layers bfloat16 inputs.
        context = torch.autocast(device.type, enabled=False) if self.sampling_dtype != "float32" else contextlib.nullcontext()
        with context:
            return self._generate(input_ids, attention_mask, num_return_sequences, **generation_kwargs)

    def _generate(self, input_ids: Tensor, attention_mask: Tensor, num_return_sequences: int,
                  **generation_kwargs) -> Tensor | tuple[Tensor, Tensor]:
        """:meth:`generate` in the precision it chose."""
        model = self._generation_model()
        G = num_return_sequences
        on_token = generation_kwargs.pop("on_token", None)  # progress: reported by our own loop only
        output_logprobs = generation_kwargs.pop("output_logprobs", False)
        # Checkpointed layers in training mode drop the cache, which the fast loop relies on;
        # a row with an empty prompt has no last token to start from.
        if (self.fast_generation and not (self._checkpointing and model.training)
                and bool(attention_mask.any(-1).all()) and unsupported_reason(model, generation_kwargs) is None):
            return sample_tokens(model, input_ids, attention_mask, num_return_sequences=G, on_token=on_token,
                                 output_logprobs=output_logprobs, **generation_kwargs)
        if output_logprobs:
            raise ValueError("CausalLMPolicy.generate: the sampler's log-probs (for importance sampling against a "
                             f"sampling_dtype {self.sampling_dtype} copy) come from grpo-seq's own sampling loop, "
                             "which cannot run this model or these options; set importance_sampling_correction none")
        if (generation_kwargs.get("num_beams") or 1) > 1:  # a beam search returns at most num_beams rows a prompt:
            return model.generate(  # one row per completion, as TRL draws them
                input_ids=input_ids.repeat_interleave(G, 0), attention_mask=attention_mask.repeat_interleave(G, 0),
                **generation_kwargs,
            )
        if G > 1 and self.share_prompt and not self._checkpointing and attention_mask[:, :-1].any(-1).all():
            head = attention_mask[:, :-1].long()
            cache = output_cache(model(
                input_ids=input_ids[:, :-1], attention_mask=head, position_ids=(head.cumsum(-1) - 1).clamp(min=0),
                use_cache=True, logits_to_keep=1,
            ))
            cache.batch_repeat_interleave(G)
            return model.generate(
                input_ids=input_ids.repeat_interleave(G, 0), attention_mask=attention_mask.repeat_interleave(G, 0),
                past_key_values=cache, **generation_kwargs,
            )
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, num_return_sequences=G,
                              **generation_kwargs)

    def save_to(self, directory: str | Path, merged: bool = True) -> None:
        """``save_pretrained`` into ``directory`` (with the tokenizer).

        With LoRA, ``merged=True`` writes the base model with the adapters merged in (loads
        anywhere, no peft needed) and the adapter alone under ``adapter/``; ``merged=False``
        writes the adapter only.
        """
        directory = Path(directory)
        if self.has_adapters:
            self.model.save_pretrained(directory / "adapter" if merged else directory)
            if merged:
                copy.deepcopy(self.model).merge_and_unload().save_pretrained(directory)
        else:
            self.model.save_pretrained(directory)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(directory)

    def load_from(self, directory: str | Path) -> None:
        """Load the weights :meth:`save_to` wrote (``merged=False``: the adapter alone under LoRA)
        into this policy, through safetensors only."""
        from safetensors.torch import load_file

        directory = Path(directory)
        files = sorted(directory.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{directory}: no .safetensors weights to load")
        state = {}
        for f in files:
            state.update(load_file(str(f)))
        if self.has_adapters:
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(self.model, state)
            unexpected = list(getattr(result, "unexpected_keys", []) or [])
            if unexpected:
                raise ValueError(f"{directory}: adapter weights that this LoRA model lacks: {unexpected[:5]}")
            return
        try:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
        except RuntimeError as e:
            raise ValueError(f"{directory}: the weights do not fit this model (another architecture?): {e}") from None
        # Tied weights (an LM head sharing the embedding) are saved once; anything else missing is an error.
        own = {name for name, _ in self.model.named_parameters()}
        missing = [k for k in missing if k in own]
        if missing or unexpected:
            raise ValueError(f"{directory}: weights missing {missing[:5]} / unexpected {list(unexpected)[:5]} for this model")


def full_pass(run: nn.Module, prompt: Tensor, prompt_mask: Tensor, tokens: Tensor, logits: bool) -> Tensor:
    """What predicts each completion token (``(B, T, V)`` logits from the model, or
    ``(B, T, H)`` last hidden states from its body), from one pass over prompt + completion."""
    t_eff = tokens.shape[1]
    input_ids = torch.cat([prompt, tokens], dim=1)
    attention_mask = torch.cat([prompt_mask.long(), torch.ones_like(tokens)], dim=1)
    # Left padding shifts positions; generate() counts them from the attention mask, so
    # scoring must too or log-probs would not match sampling.
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    # Position i predicts token i + 1: the last t_eff + 1 positions, minus the last.
    if logits:
        return run(**kwargs, logits_to_keep=t_eff + 1).logits[:, :-1]
    return run(**kwargs).last_hidden_state[:, -(t_eff + 1):-1]


def prefix_shared_pass(run: nn.Module, prompt: Tensor, prompt_mask: Tensor, tokens: Tensor, first: Tensor,
                        inverse: Tensor, logits: bool) -> Tensor:
    """The same as :func:`full_pass`, with each distinct prompt run once.

    The G completions of a prompt attend to one copy of its keys and values (gathered per
    row, so gradients from every completion flow back into the one prompt pass): the
    prompt's share of the forward and backward cost drops G-fold, the result is unchanged.
    """
    pm = prompt_mask.long()[first]
    extra = {"logits_to_keep": 1} if logits else {}
    head = run(input_ids=prompt[first], attention_mask=pm, position_ids=(pm.cumsum(-1) - 1).clamp(min=0),
               use_cache=True, **extra)
    cache = output_cache(head)
    cache.batch_select_indices(inverse)
    t_eff = tokens.shape[1]
    attention_mask = torch.cat([prompt_mask.long(), torch.ones_like(tokens)], dim=1)
    position_ids = pm.sum(-1)[inverse, None] + torch.arange(t_eff, device=tokens.device)
    extra = {"logits_to_keep": t_eff} if logits else {}
    tail = run(input_ids=tokens, attention_mask=attention_mask, position_ids=position_ids,
               **cache_kwargs(run, cache), use_cache=True, **extra)
    # The last prompt position predicts the first completion token.
    if logits:
        return torch.cat([head.logits[inverse], tail.logits[:, :-1]], dim=1)
    return torch.cat([head.last_hidden_state[inverse, -1:], tail.last_hidden_state[:, :-1]], dim=1)


def _logprobs_and_entropy(logits: Tensor, tokens: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    """Log-probs of ``tokens`` and the entropy ``H = -sum_v p_v log p_v`` of ``softmax(logits / T)``,
    both with a gradient, from the same logits ``(..., V)``. The entropy runs in chunks of
    ``_ENTROPY_ROWS`` positions, each checkpointed: the backward pass recomputes a chunk's softmax
    from its logits instead of holding float copies of the whole ``(..., V)`` tensor."""
    if temperature != 1.0:
        logits = logits.float() / temperature
    logp = token_logprobs(logits, tokens)
    chunks = logits.reshape(-1, logits.shape[-1]).split(_ENTROPY_ROWS)
    entropy = torch.cat([checkpoint(token_entropy, chunk, use_reentrant=False) for chunk in chunks])
    return logp, entropy.view(logits.shape[:-1])
