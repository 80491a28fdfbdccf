"""Which models and ``generate`` options the lean sampling loop serves; the rest go to ``model.generate``."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from torch import nn

__all__ = ["SUPPORTED_KWARGS", "cache_kwargs", "output_cache", "unwrap_peft", "unsupported_reason"]

# generate() keyword arguments this loop implements; any other one (beams, penalties, custom
# logits processors or stopping criteria, streamers, ...) sends the call to model.generate.
SUPPORTED_KWARGS = frozenset({
    "max_new_tokens", "eos_token_id", "pad_token_id", "do_sample", "temperature", "top_p", "top_k",
    "use_cache", "num_beams", "generator", "min_rows_to_drop", "fast_step", "static_step",
})


def unwrap_peft(model: nn.Module) -> nn.Module:
    """The module to call: a LoRA-style peft model injects its adapters into the wrapped model's
    layers, so calling that model directly runs with the adapters (as peft's own forward does)."""
    if hasattr(model, "get_base_model") and hasattr(model, "peft_config"):
        return model.get_base_model()
    return model


@functools.lru_cache(maxsize=None)
def _cache_name(forward_owner: type) -> str:
    params = inspect.signature(forward_owner.forward).parameters
    return "cache" if "cache" in params and "past_key_values" not in params else "past_key_values"


def cache_kwargs(model: nn.Module, cache: Any) -> dict[str, Any]:
    """The keyword that hands ``cache`` to ``model``'s forward: ``cache`` where the model names
    it so (transformers 5.x, which warns on every call given ``past_key_values``), else
    ``past_key_values``."""
    return {_cache_name(type(unwrap_peft(model))): cache}


def output_cache(output: Any) -> Any:
    """The KV cache a forward returned, under its name on this transformers (``cache`` on 5.x,
    where reading ``past_key_values`` warns)."""
    return next((output[k] for k in ("cache", "past_key_values") if k in output), None)


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
