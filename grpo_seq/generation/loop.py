"""A lean sampling loop for decoder-only ``transformers`` language models.

``model.generate`` spends much of a small model's decoding step outside the matrix products:
the default cache grows every layer's keys and values with ``torch.cat`` at every token, and a
stack of logits processors, stopping criteria and cache bookkeeping runs in Python around each
forward. :func:`sample_tokens` keeps only what sampling needs:

* keys and values are written in place into buffers sized for prompt + completion
  (:func:`preallocated_cache`); attention reads the filled prefix, never the empty tail;
* each distinct prompt is prefilled once and its cache copied to its G rows;
* one forward per token on the last token only (``logits_to_keep=1``), explicit positions,
  and an attention mask built once and sliced per step;
* temperature / top-k / top-p sampling (same rules and order as ``transformers``), seedable;
* finished rows (past their EOS) are dropped from the decoding batch once enough have ended.

The output has ``model.generate``'s shape and meaning: the prompt ids followed by the new
tokens, each row padded with ``pad_token_id`` after its first EOS, as many columns as steps run.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch
from torch import Tensor, nn

__all__ = ["preallocated_cache", "LlamaDecodeStep", "sample_tokens", "process_logits", "unsupported_reason", "SUPPORTED_KWARGS"]

# generate() keyword arguments this loop implements; any other one (beams, penalties, custom
# logits processors or stopping criteria, streamers, ...) sends the call to model.generate.
SUPPORTED_KWARGS = frozenset({
    "max_new_tokens", "eos_token_id", "pad_token_id", "do_sample", "temperature", "top_p", "top_k",
    "use_cache", "num_beams", "generator", "min_rows_to_drop", "fast_step",
})


def preallocated_cache(num_layers: int, capacity: int) -> Any:
    """A ``transformers`` cache whose layers write keys and values in place.

    Each layer owns ``(B, heads, capacity, head_dim)`` buffers; ``update`` copies the new
    states at the fill position and returns views of the filled prefix, so no step reallocates
    or concatenates the history. (``transformers``' static cache also preallocates, but attends
    over the whole capacity at every step, which is slower here.)
    """
    from transformers.cache_utils import Cache

    layer_cls = _inplace_layer_class()
    return Cache(layers=[layer_cls(capacity) for _ in range(num_layers)])


_INPLACE_LAYER = None


def _inplace_layer_class():
    """The in-place layer class, defined on first use so importing this module stays cheap."""
    global _INPLACE_LAYER
    if _INPLACE_LAYER is not None:
        return _INPLACE_LAYER
    from transformers.cache_utils import DynamicLayer

    class InPlaceLayer(DynamicLayer):
        """A ``DynamicLayer`` (so ``transformers`` treats it as a full-attention layer) whose
        keys and values live in preallocated buffers; ``keys``/``values`` are the filled views."""

        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.capacity = capacity
            self.length = 0
            self.key_buf: Tensor | None = None
            self.value_buf: Tensor | None = None

        def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
            self.dtype, self.device = key_states.dtype, key_states.device
            B, H, _, D = key_states.shape
            cap = max(self.capacity, key_states.shape[-2])
            self.key_buf = key_states.new_empty((B, H, cap, D))
            self.value_buf = value_states.new_empty((B, value_states.shape[1], cap, value_states.shape[-1]))
            self.length = 0
            self.is_initialized = True

        def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            start, end = self.length, self.length + key_states.shape[-2]
            if end > self.key_buf.shape[-2]:
                raise RuntimeError(f"preallocated_cache: {end} positions exceed the reserved {self.key_buf.shape[-2]}")
            self.key_buf[:, :, start:end].copy_(key_states)
            self.value_buf[:, :, start:end].copy_(value_states)
            self.length = end
            self.keys, self.values = self.key_buf[:, :, :end], self.value_buf[:, :, :end]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.length + query_length, 0

        def get_max_length(self) -> int:
            return -1 if self.key_buf is None else self.key_buf.shape[-2]

        def _rebuffer(self, key_buf: Tensor, value_buf: Tensor) -> None:
            self.key_buf, self.value_buf = key_buf, value_buf
            self.keys, self.values = key_buf[:, :, : self.length], value_buf[:, :, : self.length]

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.is_initialized:
                self._rebuffer(self.key_buf.repeat_interleave(repeats, 0), self.value_buf.repeat_interleave(repeats, 0))

        def batch_select_indices(self, indices: Tensor) -> None:
            if self.is_initialized:
                self._rebuffer(self.key_buf.index_select(0, indices), self.value_buf.index_select(0, indices))

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            self.batch_select_indices(beam_idx)

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError("crop takes a negative count of positions to remove")
            if self.is_initialized and tokens_to_remove:
                self.length = max(0, self.length + tokens_to_remove)
                self._rebuffer(self.key_buf, self.value_buf)

        def reset(self) -> None:
            self.length = 0
            self.key_buf = self.value_buf = None
            super().reset()

    _INPLACE_LAYER = InPlaceLayer
    return InPlaceLayer


# -- which models ------------------------------------------------------------------------------


def unwrap_peft(model: nn.Module) -> nn.Module:
    """The module to call: a LoRA-style peft model injects its adapters into the wrapped model's
    layers, so calling that model directly runs with the adapters (as peft's own forward does)."""
    if hasattr(model, "get_base_model") and hasattr(model, "peft_config"):
        return model.get_base_model()
    return model


def unsupported_reason(model: nn.Module, generation_kwargs: dict[str, Any]) -> str | None:
    """Why :func:`sample_tokens` cannot stand in for ``model.generate`` here, or None if it can.

    Falls back for: encoder-decoder models; peft prompt-learning adapters (prefix / prompt
    tuning add virtual tokens outside the base model); models whose attention is not plain
    full attention in every layer (sliding windows, linear attention, hybrid caches: their
    cache layers are not ``DynamicLayer``s); and any generate option outside
    :data:`SUPPORTED_KWARGS` (beam search, penalties, custom processors, ...).
    """
    extra = set(generation_kwargs) - SUPPORTED_KWARGS
    if extra:
        return f"unsupported generate options {sorted(extra)}"
    if generation_kwargs.get("num_beams", 1) not in (None, 1):
        return "beam search"
    if generation_kwargs.get("use_cache", True) is False:
        return "use_cache=False"
    if hasattr(model, "peft_config"):
        active = getattr(model, "active_adapter", None)
        cfg = model.peft_config.get(active) if isinstance(active, str) else None
        if cfg is None or getattr(cfg, "is_prompt_learning", False):
            return "peft prompt learning (or several active adapters)"
    base = unwrap_peft(model)
    config = getattr(base, "config", None)
    if config is None or not hasattr(base, "generate"):
        return "not a transformers generative model"
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder model"
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return f"layer types {sorted(set(layer_types))}"
    if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
        return "sliding-window attention"
    if not hasattr(text, "num_hidden_layers"):
        return "no num_hidden_layers in the config"
    return None


# -- a direct decoding step for Llama-style models ----------------------------------------------


LLAMA_LIKE_MODEL_TYPES = ("llama", "qwen2")  # same block: RMSNorm, rotary q/k (qwen2: q/k/v biases), GQA, SwiGLU


def _fast_step_unsupported(model: nn.Module) -> str | None:
    """Why :class:`LlamaDecodeStep` cannot run ``model`` (then the model's own forward decodes)."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in LLAMA_LIKE_MODEL_TYPES:
        return f"model type {getattr(config, 'model_type', None)!r}"
    if getattr(config, "hidden_act", None) != "silu" or getattr(config, "pretraining_tp", 1) != 1:
        return "activation / tensor-parallel layout"
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") not in ("default", "linear", "llama3"):
        return f"rope type {rope.get('rope_type')!r}"  # dynamic types recompute frequencies per length
    base = getattr(model, "model", None)
    if base is None or not hasattr(base, "layers") or not hasattr(model, "lm_head") or not hasattr(base, "rotary_emb"):
        return "unexpected module layout"
    for layer in base.layers:
        a, m = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        names = ("q_proj", "k_proj", "v_proj", "o_proj")
        if a is None or m is None or not all(type(getattr(a, n, None)) is nn.Linear for n in names):
            return "attention projections are not plain Linear layers (adapters?)"
        if not all(type(getattr(m, n, None)) is nn.Linear for n in ("gate_proj", "up_proj", "down_proj")):
            return "MLP projections are not plain Linear layers (adapters?)"
    if type(model.lm_head) is not nn.Linear:
        return "lm_head is not a plain Linear layer"
    return None


def few_rows_product(layer: nn.Linear, rows: int = 8) -> Callable[[Tensor], Tensor]:
    """``layer`` as a function for the few rows of a decoding step: float32 weights repacked for
    oneDNN's matrix product (where this torch build has it), else ``F.linear`` as is.

    At a few rows a product is bound by reading its weight from memory, yet MKL's float32
    ``x @ W.T`` reads it well below the memory's speed; oneDNN reads weights packed for it
    faster, a large LM head most of all. Packing copies the weight (once per generate call, as
    much memory again as the float32 weights); the rows may then vary. Same float32 arithmetic,
    summed in another order. bfloat16 and autocast keep ``F.linear``: there it is already the
    fastest of the two.
    """
    w, b = layer.weight, layer.bias
    if w.dtype == torch.float32 and w.device.type == "cpu" and _onednn_linear() and not torch.is_autocast_enabled("cpu"):
        packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), rows)
        bias = b.detach() if b is not None else None
        return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return functools.partial(nn.functional.linear, weight=w, bias=b)


@functools.cache
def _onednn_linear() -> bool:
    """True where oneDNN's packed float32 linear works in this torch build (checked once)."""
    try:
        w, x = torch.eye(4), torch.arange(8.0).view(2, 4)
        y = torch.ops.mkldnn._linear_pointwise(x, torch.ops.mkldnn._reorder_linear_weight(w, 2), None, "none", [], "")
        return bool(torch.backends.mkldnn.is_available() and torch.equal(y, x))
    except (AttributeError, RuntimeError):
        return False


class LlamaDecodeStep:
    """One decoding step of a Llama-style model without its module machinery.

    The same arithmetic as the model's forward on one token per row, minus the per-module
    Python overhead: rotary tables computed once, and attention of the single query as two
    small batched products over the filled cache prefix, each key/value head serving its group
    of query heads without being repeated. The weight products go through
    :func:`few_rows_product`. Fusing q/k/v or gate/up into one product saved nothing
    measurable with ``F.linear``, so the weights are used as they are. Built at each generate
    call from the current weights.
    """

    def __init__(self, model: nn.Module, max_positions: int, rows: int = 8):
        base = model.model
        config = model.config
        self.embed = base.embed_tokens.weight
        self.layers = []
        for layer in base.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((
                layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon,
                *(few_rows_product(w, rows) for w in (a.q_proj, a.k_proj, a.v_proj, a.o_proj)),
                layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon,
                *(few_rows_product(w, rows) for w in (m.gate_proj, m.up_proj, m.down_proj)),
            ))
        self.norm = (base.norm.weight, base.norm.variance_epsilon)
        self.head = few_rows_product(model.lm_head, rows)
        a0 = base.layers[0].self_attn
        self.head_dim = a0.head_dim
        self.n_q = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.scaling = a0.scaling
        pos = torch.arange(max_positions, device=self.embed.device)[None]
        cos, sin = base.rotary_emb(self.embed[:1][None], position_ids=pos)  # (1, T, D), in the model's dtype
        self.cos, self.sin = cos[0], sin[0]

    @staticmethod
    def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(x.dtype)

    def _rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def __call__(self, token: Tensor, position: Tensor, cache: Any, bias: Tensor | None) -> Tensor:
        """Logits ``(N, V)`` for ``token`` ``(N,)`` at ``position`` ``(N,)``; appends to ``cache``.

        ``bias``: ``(N, 1, 1, L)`` additive mask over the cache after this step (-inf on prompt
        padding), or None without padding.
        """
        N = token.shape[0]
        D, Hq, Hkv = self.head_dim, self.n_q, self.n_kv
        rep = Hq // Hkv
        h = self.embed.index_select(0, token)
        cos, sin = self.cos[position][:, None], self.sin[position][:, None]  # (N, 1, D)
        for (ln1, eps1, wq, wk, wv, wo, ln2, eps2, wg, wu, wd), layer in zip(self.layers, cache.layers):
            x = self._rms(h, ln1, eps1)
            q = self._rope(wq(x).view(N, Hq, D), cos, sin)
            k = self._rope(wk(x).view(N, Hkv, 1, D), cos[:, None], sin[:, None])
            v = wv(x).view(N, Hkv, 1, D)
            keys, values = layer.update(k, v)  # (N, Hkv, L, D) views of the filled prefix
            # Query heads grouped under their key/value head: (N, Hkv, rep, D) against (N, Hkv, L, D).
            scores = torch.matmul(q.view(N, Hkv, rep, D), keys.transpose(-1, -2)).float() * self.scaling
            if bias is not None:
                scores = scores + bias
            attn = torch.matmul(scores.softmax(-1).to(values.dtype), values).reshape(N, Hq * D)
            h = h + wo(attn)
            x = self._rms(h, ln2, eps2)
            h = h + wd(nn.functional.silu(wg(x)) * wu(x))
        return self.head(self._rms(h, *self.norm))


# -- sampling ----------------------------------------------------------------------------------


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
    costs ~17 ms per step for 8 rows of a 49k vocabulary on one CPU core, this well under 1 ms."""
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
    output_logprobs: bool = False,
    use_cache: bool | None = True,
    num_beams: int | None = 1,
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
    ``output_logprobs``: also return ``(B * G, steps)`` log-probabilities of the chosen tokens
    under the processed distribution (temperature, top-k, top-p), 0 after EOS.
    ``use_cache`` and ``num_beams`` are accepted for ``generate``'s sake and must keep their
    defaults (:func:`unsupported_reason` sends other values to ``model.generate``).
    """
    if use_cache is False or num_beams not in (None, 1):
        raise ValueError("sample_tokens: only cached sampling / greedy decoding (use model.generate for beams)")
    gc = getattr(model, "generation_config", None)

    def default(value, name, fallback):
        if value is not None:
            return value
        got = getattr(gc, name, None) if gc is not None else None
        return fallback if got is None else got

    max_new_tokens = int(default(max_new_tokens, "max_new_tokens", 20))
    do_sample = bool(default(do_sample, "do_sample", False))
    temperature = float(default(temperature, "temperature", 1.0))
    top_p = float(default(top_p, "top_p", 1.0))
    top_k = int(default(top_k, "top_k", 0))
    eos = _eos_list(default(eos_token_id, "eos_token_id", None))
    pad = default(pad_token_id, "pad_token_id", None)
    if pad is None:
        pad = eos[0] if eos else 0

    decoder = unwrap_peft(model)
    device = input_ids.device
    G = num_return_sequences
    B0, P = input_ids.shape
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    pm = attention_mask.long()
    N = B0 * G
    total = P + max_new_tokens

    # Prefill each distinct prompt once, into buffers with room for the whole completion.
    num_layers = decoder.config.get_text_config(decoder=True).num_hidden_layers
    cache = preallocated_cache(num_layers, total)
    out = decoder(
        input_ids=input_ids, attention_mask=pm, position_ids=(pm.cumsum(-1) - 1).clamp(min=0),
        past_key_values=cache, use_cache=True, logits_to_keep=1,
    )
    logits = out.logits[:, -1]
    if G > 1:
        cache.batch_repeat_interleave(G)
        logits = logits.repeat_interleave(G, 0)

    # Masks over prompt + completion, built once and sliced per step. Without prompt padding no
    # mask is needed at all (attention over the whole prefix is what a single query wants).
    padded = not bool(pm.all())
    mask = torch.cat([pm.repeat_interleave(G, 0), pm.new_ones((N, max_new_tokens))], 1) if padded else None
    step = LlamaDecodeStep(decoder, total, rows=N) if fast_step and _fast_step_unsupported(decoder) is None else None
    if step is not None and mask is not None:  # additive, as the direct step adds it to the scores
        mask = torch.zeros(mask.shape, device=device).masked_fill_(mask == 0, float("-inf"))[:, None, None]
    position = pm.sum(-1).repeat_interleave(G, 0)  # of the next token, per row

    sequences = torch.full((N, total), pad, dtype=input_ids.dtype, device=device)
    sequences[:, :P] = input_ids.repeat_interleave(G, 0)
    logprobs = torch.zeros((N, max_new_tokens), device=device) if output_logprobs else None
    eos_t = torch.tensor(eos, device=device, dtype=input_ids.dtype) if eos else None
    rows = torch.arange(N, device=device)  # original row of each row still decoding
    done = torch.zeros(N, dtype=torch.bool, device=device)
    ended_since_drop = 0
    steps = 0
    for t in range(max_new_tokens):
        scores = process_logits(logits, temperature, top_k, top_p) if do_sample else logits.float()
        token = _draw(scores, do_sample, generator)
        if done.any():  # rows kept in the batch after their EOS emit padding
            token = token.masked_fill(done, pad)
        sequences[rows, P + t] = token
        if logprobs is not None:
            lp = scores.log_softmax(-1).gather(-1, token[:, None]).squeeze(-1)
            logprobs[rows, t] = lp.masked_fill(done, 0.0)
        steps = t + 1
        if eos_t is not None:
            newly = torch.isin(token, eos_t) & ~done
            n_new = int(newly.sum())
            if n_new:
                done = done | newly
                ended_since_drop += n_new
                if bool(done.all()):
                    break
        if t + 1 == max_new_tokens:
            break
        if min_rows_to_drop and ended_since_drop >= min_rows_to_drop:
            keep = (~done).nonzero().squeeze(-1)
            cache.batch_select_indices(keep)
            rows, token, position, done = rows[keep], token[keep], position[keep], done[keep]
            if mask is not None:
                mask = mask[keep]
            ended_since_drop = 0
        step_mask = mask[..., : P + t + 1] if mask is not None else None
        if step is not None:
            logits = step(token, position, cache, step_mask)
        else:
            logits = decoder(
                input_ids=token[:, None], attention_mask=step_mask, position_ids=position[:, None],
                past_key_values=cache, use_cache=True, logits_to_keep=1,
            ).logits[:, -1]
        position = position + 1
    sequences = sequences[:, : P + steps]
    if logprobs is not None:
        return sequences, logprobs[:, :steps]
    return sequences
