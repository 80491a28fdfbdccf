"""A decoding step whose tensors never move: replayed as one CUDA graph per token on a GPU.

:class:`~.decode_step.LlamaDecodeStep` launches every layer's kernels from Python at each
token; at the batch sizes of a GRPO rollout on a GPU the launches cost more than the
arithmetic. This step reads and writes only tensors allocated once per generate call (the
tokens, their positions, the cache's fill index, the key/value buffers at their full capacity,
the logits), so it is captured once as a CUDA graph and each token replays it. Attention spans
the whole capacity with the unfilled tail masked out (``-inf``), so no shape grows as the
completion does; rows that have ended stay in the batch (its shape is fixed too).

On a CPU the same step runs eagerly: that is how its arithmetic is tested against the loop's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .decode_step import LlamaDecodeStep

__all__ = ["StaticDecodeStep"]


class StaticDecodeStep:
    """:class:`LlamaDecodeStep`'s arithmetic over fixed buffers, captured as a CUDA graph on a GPU.

    Args:
        step: the model's decode step (its weights and rotary tables).
        cache: the prefilled :func:`~.cache.preallocated_cache`, whose buffers hold every
            position of prompt and completion; this step writes into them in place.
        pad_bias: ``(N, 1, 1, capacity)`` additive mask, ``-inf`` on prompt padding, or None.
        graph: capture and replay a CUDA graph (the cache must be on a CUDA device).
    """

    def __init__(self, step: LlamaDecodeStep, cache: Any, pad_bias: Tensor | None, graph: bool):
        self.step = step
        self.keys = [layer.key_buf for layer in cache.layers]
        self.values = [layer.value_buf for layer in cache.layers]
        # The slots past the prompt hold whatever memory the buffers were given: attention weighs
        # them by an exact 0, but 0 x NaN is NaN, so they start as zeros.
        for buf in (*self.keys, *self.values):
            buf[:, :, cache.layers[0].length:].zero_()
        rows, _, capacity, _ = self.keys[0].shape
        device = self.keys[0].device
        self.token = torch.zeros(rows, dtype=torch.long, device=device)
        self.position = torch.zeros(rows, dtype=torch.long, device=device)
        self.fill = torch.full((1,), capacity - 1, dtype=torch.long, device=device)
        self.slots = torch.arange(capacity, device=device)
        self.pad_bias = pad_bias if pad_bias is not None else torch.zeros((rows, 1, 1, capacity), device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: Tensor | None = None
        if graph:
            self._capture()

    def _capture(self) -> None:
        """Warm up on a side stream (as capture requires), then record one step. The fill index
        points at the last slot meanwhile: the loop never advances past the last token, so no
        real step writes or reads that slot."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), self._autocast():
            for _ in range(2):
                self._compute()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: another thread's CUDA work (a served model's request thread, the trainer)
        # does not break this capture, nor does this capture forbid it
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"), self._autocast():
            self.logits = self._compute()

    @staticmethod
    def _autocast():
        """The caller's autocast state, without its cast cache (a cached cast made during
        capture would live in the graph's memory)."""
        on = torch.is_autocast_enabled("cuda")
        return torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), enabled=on, cache_enabled=False)

    def _compute(self) -> Tensor:
        """Logits ``(N, V)`` of the tokens in ``self.token``; writes their keys and values at ``self.fill``."""
        st = self.step
        N, D, Hq, Hkv = self.token.shape[0], st.head_dim, st.n_q, st.n_kv
        rep = Hq // Hkv
        bias = self.pad_bias.masked_fill(self.slots > self.fill, float("-inf"))
        h = st.embed.index_select(0, self.token)
        cos, sin = st.cos.index_select(0, self.position)[:, None], st.sin.index_select(0, self.position)[:, None]
        for (ln1, eps1, wq, wk, wv, wo, ln2, eps2, wg, wu, wd), keys, values in zip(st.layers, self.keys, self.values):
            x = st._rms(h, ln1, eps1)
            q = st._rope(wq(x).view(N, Hq, D), cos, sin)
            k = st._rope(wk(x).view(N, Hkv, 1, D), cos[:, None], sin[:, None])
            keys.index_copy_(2, self.fill, k.to(keys.dtype))
            values.index_copy_(2, self.fill, wv(x).view(N, Hkv, 1, D).to(values.dtype))
            scores = torch.matmul(q.view(N, Hkv, rep, D), keys.transpose(-1, -2)).float() * st.scaling + bias
            attn = torch.matmul(scores.softmax(-1).to(values.dtype), values).reshape(N, Hq * D)
            h = h + wo(attn)
            x = st._rms(h, ln2, eps2)
            h = h + wd(nn.functional.silu(wg(x)) * wu(x))
        return st.head(st._rms(h, *st.norm))

    def __call__(self, token: Tensor, position: Tensor, fill: int) -> Tensor:
        """Logits ``(N, V)`` for ``token`` ``(N,)`` at rotary ``position`` ``(N,)``, its key and
        value written at cache slot ``fill``. On a GPU the returned tensor is overwritten by the
        next call."""
        self.token.copy_(token)
        self.position.copy_(position)
        self.fill.fill_(fill)
        if self.graph is None:
            return self._compute()
        self.graph.replay()
        return self.logits
