"""One decoding step of a Llama-style model, without its module machinery.

The weight products of a step see a few rows each; :func:`few_rows_product` runs them on
weights packed for oneDNN where this torch build has it (within the tested torch versions),
else through ``F.linear``.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any, Callable

import torch
from torch import Tensor, nn

__all__ = ["LLAMA_LIKE_MODEL_TYPES", "LlamaDecodeStep", "few_rows_product", "fast_step_unsupported", "TESTED_TORCH"]

logger = logging.getLogger(__name__)

LLAMA_LIKE_MODEL_TYPES = ("llama", "qwen2")  # same block: RMSNorm, rotary q/k (qwen2: q/k/v biases), GQA, SwiGLU


def fast_step_unsupported(model: nn.Module) -> str | None:
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


# The packed products call private oneDNN ops (torch.ops.mkldnn.*), which carry no promise of a
# stable signature: they are used only on the torch versions this was tested with, [first, last).
TESTED_TORCH = ((2, 4), (3, 0))
_PRIVATE_OPS = ("_reorder_linear_weight", "_linear_pointwise")


def _private_ops_unusable() -> str | None:
    """Why the private oneDNN ops are not used with this torch, or None when they may be."""
    version = tuple(int(part) for part in re.findall(r"\d+", torch.__version__)[:2])
    first, last = TESTED_TORCH
    if not first <= version < last:
        return f"torch {torch.__version__} is outside the tested range {first} to {last}"
    for name in _PRIVATE_OPS:
        try:
            getattr(torch.ops.mkldnn, name)
        except (AttributeError, RuntimeError):
            return f"torch {torch.__version__} has no torch.ops.mkldnn.{name}"
    return None


@functools.cache
def _onednn_linear() -> bool:
    """True where oneDNN's packed float32 linear works in this torch build (checked once)."""
    reason = _private_ops_unusable()
    if reason is not None:
        logger.info("few_rows_product: %s; float32 products use F.linear", reason)
        return False
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
