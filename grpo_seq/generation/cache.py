"""A preallocated key/value cache that ``transformers`` models write in place.

The default cache grows every layer's keys and values with ``torch.cat`` at every token; this
one writes them into buffers sized for prompt + completion, and attention reads the filled
prefix, never the empty tail.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["preallocated_cache"]


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
    if _INPLACE_LAYER is None:
        from transformers.cache_utils import DynamicLayer

        _INPLACE_LAYER = type("InPlaceLayer", (_InPlaceBuffers, DynamicLayer), {"__module__": __name__})
    return _INPLACE_LAYER


class _InPlaceBuffers:
    """The in-place layer's methods, mixed in front of ``transformers``' ``DynamicLayer`` (so
    ``transformers`` treats it as a full-attention layer) by :func:`_inplace_layer_class`: keys
    and values live in preallocated buffers; ``keys``/``values`` are the filled views. Kept apart
    from ``DynamicLayer`` so importing this module does not import ``transformers``."""

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
