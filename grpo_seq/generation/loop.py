"""The sampling loop: prefill each distinct prompt once, then one token per step for every row.

:func:`sample_tokens` returns ``model.generate``'s samples with only what sampling needs: the
in-place cache (:mod:`.cache`), one forward per token on the last token only, explicit
positions, an attention mask built once and sliced per step, temperature / top-k / top-p
(``transformers``' rules and order), and finished rows dropped from the batch once enough
have ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from .cache import preallocated_cache
from .decode_step import LlamaDecodeStep, fast_step_unsupported
from .static_step import StaticDecodeStep
from .support import cache_kwargs, unwrap_peft

__all__ = ["process_logits", "sample_tokens"]


def process_logits(logits: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Float32 logits after temperature, then top-k, then top-p (``transformers``' order and
    rules: removed tokens get ``-inf``; top-p keeps the smallest set whose probability exceeds
    ``top_p``, at least one token)."""
    scores = logits.float()
    if temperature != 1.0:
        scores = scores / temperature
    V = scores.shape[-1]
    if top_k and 0 < top_k < V:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(scores, descending=False)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        remove = cum <= 1 - top_p
        remove[..., -1:] = False
        scores = scores.masked_fill(remove.scatter(-1, sorted_idx, remove), float("-inf"))
    return scores


def _draw(scores: Tensor, do_sample: bool, generator: torch.Generator | None) -> Tensor:
    """Argmax, or one draw per row from ``softmax(scores)`` by inverting its CDF with one
    uniform per row: ``torch.multinomial`` draws an exponential per vocabulary entry, which
    costs far more at a large vocabulary than one cumulative sum and a search."""
    if not do_sample:
        return scores.argmax(-1)
    cdf = scores.softmax(-1).double().cumsum_(-1)
    u = torch.rand(scores.shape[0], 1, dtype=cdf.dtype, device=cdf.device, generator=generator) * cdf[:, -1:]
    # u in [0, total): the first entry whose CDF exceeds u has a positive probability.
    token = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    return token.clamp_(max=scores.shape[-1] - 1)


def _eos_list(eos: int | Sequence[int] | Tensor | None) -> list[int]:
    if eos is None:
        return []
    if isinstance(eos, Tensor):
        return eos.flatten().tolist()
    if isinstance(eos, int):
        return [eos]
    return list(eos)


@dataclass
class _Options:
    """The sampling options of one call, each resolved against the model's generation config."""

    max_new_tokens: int
    do_sample: bool
    temperature: float
    top_p: float
    top_k: int
    eos: list[int]
    pad: int


def _resolve_options(model: nn.Module, **given) -> _Options:
    """Options left as None take the model's ``generation_config`` values, as ``generate`` does."""
    gc = getattr(model, "generation_config", None)

    def default(name: str, fallback):
        if given[name] is not None:
            return given[name]
        got = getattr(gc, name, None) if gc is not None else None
        return fallback if got is None else got

    eos = _eos_list(default("eos_token_id", None))
    pad = default("pad_token_id", None)
    return _Options(
        max_new_tokens=int(default("max_new_tokens", 20)), do_sample=bool(default("do_sample", False)),
        temperature=float(default("temperature", 1.0)), top_p=float(default("top_p", 1.0)),
        top_k=int(default("top_k", 0)), eos=eos, pad=(eos[0] if eos else 0) if pad is None else pad,
    )


@dataclass
class _Run:
    """One call's decoding state. Rows still decoding are ``rows`` (their original indices);
    ``sequences`` and ``logprobs`` keep every original row."""

    P: int  # prompt columns
    cache: object
    logits: Tensor  # (rows decoding, V): the next token's
    mask: Tensor | None  # over prompt + completion; None without prompt padding
    step: LlamaDecodeStep | StaticDecodeStep | None  # the direct step, or None for the model's forward
    position: Tensor  # of the next token, per row decoding
    sequences: Tensor
    logprobs: Tensor | None
    eos: Tensor | None
    rows: Tensor
    done: Tensor  # per row decoding: past its EOS
    token: Tensor | None = None  # the last chosen, per row decoding
    ended_since_drop: int = 0
    steps: int = 0
    ended_at: Tensor | None = None  # per row: the step of its EOS (-1 before); kept by the static step


# The static step asks the device whether every row has ended only every this many tokens: each
# question makes the host wait for the device, which would otherwise queue the next steps' work
# while the current one runs. Ended rows emit padding meanwhile, cut off at the end.
_CHECK_EVERY = 16


def _prefill(decoder: nn.Module, input_ids: Tensor, pm: Tensor, G: int, total: int) -> tuple[object, Tensor]:
    """Run each distinct prompt once, into buffers with room for the whole completion, and copy
    its cache and next-token logits to its G rows."""
    num_layers = decoder.config.get_text_config(decoder=True).num_hidden_layers
    cache = preallocated_cache(num_layers, total)
    out = decoder(
        input_ids=input_ids, attention_mask=pm, position_ids=(pm.cumsum(-1) - 1).clamp(min=0),
        **cache_kwargs(decoder, cache), use_cache=True, logits_to_keep=1,
    )
    logits = out.logits[:, -1]
    if G > 1:
        cache.batch_repeat_interleave(G)
        logits = logits.repeat_interleave(G, 0)
    return cache, logits


def _start(decoder: nn.Module, input_ids: Tensor, attention_mask: Tensor | None, G: int, opts: _Options,
           fast_step: bool, static_step: bool | None, output_logprobs: bool) -> _Run:
    """Set-up: prefill, the masks, the direct step where the model allows it (over fixed
    buffers, replayed as a CUDA graph, where ``static_step`` asks), the output buffers."""
    device = input_ids.device
    B0, P = input_ids.shape
    pm = (attention_mask if attention_mask is not None else torch.ones_like(input_ids)).long()
    N, total = B0 * G, P + opts.max_new_tokens
    cache, logits = _prefill(decoder, input_ids, pm, G, total)
    # Masks over prompt + completion, built once and sliced per step. Without prompt padding no
    # mask is needed at all (attention over the whole prefix is what a single query wants).
    padded = not bool(pm.all())
    mask = torch.cat([pm.repeat_interleave(G, 0), pm.new_ones((N, opts.max_new_tokens))], 1) if padded else None
    step = LlamaDecodeStep(decoder, total, rows=N) if fast_step and fast_step_unsupported(decoder) is None else None
    if step is not None and mask is not None:  # additive, as the direct step adds it to the scores
        mask = torch.zeros(mask.shape, device=device).masked_fill_(mask == 0, float("-inf"))[:, None, None]
    static = step is not None and (device.type == "cuda" if static_step is None else static_step)
    if static:
        step, mask = StaticDecodeStep(step, cache, mask, graph=device.type == "cuda"), None
    sequences = torch.full((N, total), opts.pad, dtype=input_ids.dtype, device=device)
    sequences[:, :P] = input_ids.repeat_interleave(G, 0)
    return _Run(
        P=P, cache=cache, logits=logits, mask=mask, step=step, position=pm.sum(-1).repeat_interleave(G, 0),
        sequences=sequences,
        logprobs=torch.zeros((N, opts.max_new_tokens), device=device) if output_logprobs else None,
        eos=torch.tensor(opts.eos, device=device, dtype=input_ids.dtype) if opts.eos else None,
        rows=torch.arange(N, device=device), done=torch.zeros(N, dtype=torch.bool, device=device),
        ended_at=torch.full((N,), -1, dtype=torch.long, device=device) if static else None,
    )


def _choose(run: _Run, t: int, opts: _Options, generator: torch.Generator | None) -> bool:
    """Draw step ``t``'s token of every row decoding and write it (and its log-prob); True when
    every row has now ended."""
    scores = process_logits(run.logits, opts.temperature, opts.top_k, opts.top_p) if opts.do_sample else run.logits.float()
    token = _draw(scores, opts.do_sample, generator)
    if run.ended_at is not None or run.done.any():  # rows kept in the batch after their EOS emit padding
        token = token.masked_fill(run.done, opts.pad)
    run.sequences[run.rows, run.P + t] = token
    if run.logprobs is not None:
        lp = scores.log_softmax(-1).gather(-1, token[:, None]).squeeze(-1)
        run.logprobs[run.rows, t] = lp.masked_fill(run.done, 0.0)
    run.token, run.steps = token, t + 1
    if run.eos is None:
        return False
    newly = torch.isin(token, run.eos) & ~run.done
    if run.ended_at is not None:  # no waiting for the device but every _CHECK_EVERY steps
        run.done = run.done | newly
        run.ended_at = run.ended_at.masked_fill(newly, t)
        return (t + 1) % _CHECK_EVERY == 0 and _all_ended(run)
    n_new = int(newly.sum())
    if not n_new:
        return False
    run.done = run.done | newly
    run.ended_since_drop += n_new
    return bool(run.done.all())


def _all_ended(run: _Run) -> bool:
    """Whether every row has ended (asking the device); if so, the steps after the last EOS are
    dropped from the output, as if decoding had stopped there."""
    if not bool(run.done.all()):
        return False
    run.steps = int(run.ended_at.max()) + 1
    return True


def _drop_finished(run: _Run) -> None:
    """Cut the rows past their EOS out of the decoding batch (and out of the cache)."""
    keep = (~run.done).nonzero().squeeze(-1)
    run.cache.batch_select_indices(keep)
    run.rows, run.token, run.position, run.done = run.rows[keep], run.token[keep], run.position[keep], run.done[keep]
    if run.mask is not None:
        run.mask = run.mask[keep]
    run.ended_since_drop = 0


def _advance(run: _Run, decoder: nn.Module, t: int) -> None:
    """Feed step ``t``'s tokens through the model: the next logits, the cache one position longer."""
    step_mask = run.mask[..., : run.P + t + 1] if run.mask is not None else None
    if isinstance(run.step, StaticDecodeStep):
        run.logits = run.step(run.token, run.position, run.P + t)
    elif run.step is not None:
        run.logits = run.step(run.token, run.position, run.cache, step_mask)
    else:
        run.logits = decoder(
            input_ids=run.token[:, None], attention_mask=step_mask, position_ids=run.position[:, None],
            **cache_kwargs(decoder, run.cache), use_cache=True, logits_to_keep=1,
        ).logits[:, -1]
    run.position = run.position + 1


def _decode(run: _Run, decoder: nn.Module, opts: _Options, generator: torch.Generator | None, min_rows_to_drop: int,
            on_token: Callable[[int], None] | None) -> None:
    """Choose a token for every running row, position by position, until all have ended or the limit."""
    for t in range(opts.max_new_tokens):
        finished = _choose(run, t, opts, generator)
        if on_token is not None:
            on_token(t + 1)
        if finished:
            break
        if t + 1 == opts.max_new_tokens:
            if run.ended_at is not None and run.eos is not None:
                _all_ended(run)
            break
        if min_rows_to_drop and run.ended_since_drop >= min_rows_to_drop and not isinstance(run.step, StaticDecodeStep):
            _drop_finished(run)
        _advance(run, decoder, t)


@torch.no_grad()
def sample_tokens(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    max_new_tokens: int | None = None,
    num_return_sequences: int = 1,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    do_sample: bool | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    min_rows_to_drop: int = 2,
    fast_step: bool = True,
    static_step: bool | None = None,
    output_logprobs: bool = False,
    use_cache: bool | None = True,
    num_beams: int | None = 1,
    on_token: Callable[[int], None] | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """``model.generate``'s samples: ``(B * G, P + steps)``, prompt then new tokens.

    ``input_ids`` are left-padded prompts ``(B, P)`` with ``attention_mask``; each prompt is
    run once and its cache copied to its ``num_return_sequences`` (G) rows, which sit together
    (row ``b * G + g``), as ``generate`` orders them. Options left as None take the model's
    ``generation_config`` values, as ``generate`` does. A row ends at its first EOS (any of
    ``eos_token_id``) and is padded after it; decoding stops when every row has ended or after
    ``max_new_tokens``. Randomness comes from ``generator`` (else the global RNG), so a seed
    reproduces the samples.

    ``min_rows_to_drop``: finished rows leave the decoding batch once at least this many have
    ended since the last drop (their cache rows are cut out); 0 never drops.
    ``fast_step``: decode Llama-style models with :class:`LlamaDecodeStep` rather than their
    forward (the prompt always goes through the forward).
    ``static_step``: decode with that step over fixed buffers (:class:`StaticDecodeStep`),
    captured once and replayed per token as a CUDA graph on a GPU, eagerly elsewhere; ended
    rows then stay in the batch. None: on a CUDA device only.
    ``output_logprobs``: also return ``(B * G, steps)`` log-probabilities of the chosen tokens
    under the processed distribution (temperature, top-k, top-p), 0 after EOS.
    ``on_token(t)``: called after each of the ``t`` new positions is chosen (a progress report).
    ``use_cache`` and ``num_beams`` are accepted for ``generate``'s sake and must keep their
    defaults (:func:`unsupported_reason` sends other values to ``model.generate``).
    """
    if use_cache is False or num_beams not in (None, 1):
        raise ValueError("sample_tokens: only cached sampling / greedy decoding (use model.generate for beams)")
    opts = _resolve_options(
        model, max_new_tokens=max_new_tokens, do_sample=do_sample, temperature=temperature, top_p=top_p,
        top_k=top_k, eos_token_id=eos_token_id, pad_token_id=pad_token_id,
    )
    decoder = unwrap_peft(model)
    run = _start(decoder, input_ids, attention_mask, num_return_sequences, opts, fast_step, static_step, output_logprobs)
    _decode(run, decoder, opts, generator, min_rows_to_drop, on_token)
    sequences = run.sequences[:, : run.P + run.steps]
    if run.logprobs is not None:
        return sequences, run.logprobs[:, : run.steps]
    return sequences
