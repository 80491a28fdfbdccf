"""A cheaper copy of the policy to sample from: bfloat16, or int8 dynamically quantised.

Training keeps its float32 weights; sampling, most of a language model's step on a CPU, runs
from a copy that reads half (bfloat16) or a quarter (int8) of the bytes per decoding step. The
copy is built once and refreshed from the trained weights before each sampling call: ``copy_``
into its preallocated tensors for bfloat16, a requantisation of each ``nn.Linear`` for int8.
The sampler's distribution then differs a little from the trained policy's; the trainer
corrects for it with importance weights (:func:`grpo_seq.math.objective.importance_weights`).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from typing import Iterator

import torch
from torch import nn

__all__ = ["SAMPLING_DTYPES", "SamplingCopy"]

SAMPLING_DTYPES = ("float32", "bfloat16", "int8")


@contextlib.contextmanager
def _quiet_quantisation() -> Iterator[None]:
    """torch (2.10 on) warns at every call that eager quantisation and qint8 tensors are
    deprecated in favour of torchao; the user can do nothing about it here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*(torch\.ao\.quantization is deprecated|quantized tensor creation).*")
        yield


def _dynamic_linear_type() -> type:
    return torch.ao.nn.quantized.dynamic.Linear


def _quantised_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` as ``quantize_dynamic`` stores it: per-tensor symmetric qint8, scale from its
    min and max (the default dynamic qconfig's weight observer)."""
    observer = torch.ao.quantization.default_dynamic_qconfig.weight()
    observer(weight)
    scale, zero_point = observer.calculate_qparams()
    return torch.quantize_per_tensor(weight.float(), float(scale), int(zero_point), torch.qint8)


class SamplingCopy:
    """The copy of ``model`` that samples, in ``dtype`` (one of :data:`SAMPLING_DTYPES`).

    :meth:`refresh` returns the model to sample from, its weights equal to the trained ones
    (cast to bfloat16, or quantised): ``float32`` returns ``model`` itself, unchanged behaviour.
    Under ``bfloat16`` only the parameters are cast (buffers such as rotary frequencies stay
    float32); a model already in bfloat16 samples from itself. ``int8`` runs
    ``torch.ao.quantization.quantize_dynamic`` on every ``nn.Linear`` (CPU only); a peft
    (LoRA) model is refused, as its adapters would have to be merged at every refresh.
    """

    def __init__(self, dtype: str = "float32"):
        if dtype not in SAMPLING_DTYPES:
            raise ValueError(f"sampling_dtype must be one of {SAMPLING_DTYPES}, got {dtype!r}")
        self.dtype = dtype
        self.model: nn.Module | None = None
        self._linears: list[tuple[nn.Module, nn.Linear]] = []  # int8: (quantised copy, trained layer)
        self._params: list[tuple[torch.Tensor, torch.Tensor]] = []  # (copy's tensor, trained tensor)

    @torch.no_grad()
    def refresh(self, model: nn.Module) -> nn.Module:
        """The model to sample from, its weights refreshed from ``model``'s current ones."""
        if self.dtype == "float32":
            return model
        if self.dtype == "bfloat16" and all(p.dtype == torch.bfloat16 for p in model.parameters()):
            return model
        if self.model is None:
            self._build(model)
        else:
            for c, p in self._params:
                c.copy_(p)
            with _quiet_quantisation():
                for q, layer in self._linears:
                    q.set_weight_bias(_quantised_weight(layer.weight), layer.bias)
        return self.model

    def _build(self, model: nn.Module) -> None:
        """The copy, once, and the pairs of tensors that each refresh copies or requantises."""
        device = next(model.parameters()).device
        if self.dtype == "int8":
            if hasattr(model, "peft_config"):
                raise ValueError("sampling_dtype int8: LoRA (peft) models are not quantised (their adapters would be "
                                 "merged at every refresh); use bfloat16")
            if any(p.dtype != torch.float32 for p in model.parameters()):
                raise ValueError("sampling_dtype int8: dynamic quantisation takes float32 weights; this model's are "
                                 f"{next(p.dtype for p in model.parameters() if p.dtype != torch.float32)}")
            if device.type != "cpu":
                raise ValueError(f"sampling_dtype int8: dynamic quantisation runs on CPU; the model is on {device}; "
                                 "use bfloat16")
        clone = copy.deepcopy(model).requires_grad_(False).eval()
        if self.dtype == "bfloat16":
            for p in clone.parameters():
                p.data = p.data.to(torch.bfloat16)
        else:
            with _quiet_quantisation():
                clone = torch.ao.quantization.quantize_dynamic(clone, {nn.Linear}, dtype=torch.qint8)
            self._linears = [(m, model.get_submodule(name)) for name, m in clone.named_modules()
                             if isinstance(m, _dynamic_linear_type())]
        self._params = [(p, model.get_parameter(name)) for name, p in clone.named_parameters()]
        self.model = clone
