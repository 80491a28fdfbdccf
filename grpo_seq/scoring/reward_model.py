"""A sequence-classification model as a reward function, as TRL scores with one.

A reward model scores each (prompt, completion) pair with the logit of its single label:

    r_i = logits(tokenize(text_i))[0],  text_i = prompt_i + completion_i                (standard)
                                        text_i = chat_template(prompt_i + completion_i) (conversational)

tokenised without added special tokens, padded on the right, in one batch, without gradients. The
model is never trained: its weights are frozen and it stays in eval mode.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import MissingPathError, UsageError

__all__ = ["RewardModel", "is_reward_model_spec", "load_reward_model"]


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # org/name; ./x, /x, ~/x and a/b/c are paths


def is_reward_model_spec(spec: Any) -> bool:
    """True for what names a reward model rather than a reward function: a model object
    (``nn.Module``), a local folder, or a hub id (``org/name``: an import path has no ``/``)."""
    if isinstance(spec, torch.nn.Module):
        return True
    if not isinstance(spec, (str, os.PathLike)):
        return False
    text = str(spec)
    return Path(text).is_dir() or ("/" in text and ":" not in text)


class RewardModel:
    """A reward function ``fn(prompts, completions, **kwargs) -> list[float]`` over a
    sequence-classification model and its tokenizer; logged as the model's folder or hub name."""

    def __init__(self, model: Any, tokenizer: Any, name: str | None = None):
        self.model = model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        if getattr(tokenizer, "pad_token", None) is None:
            tokenizer.pad_token = tokenizer.eos_token  # TRL's default: the EOS token pads
        if getattr(model.config, "pad_token_id", None) is None:
            model.config.pad_token_id = tokenizer.pad_token_id
        path = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.__name__ = str(path).rstrip("/").split("/")[-1]

    def texts(self, prompts: Sequence[Any], completions: Sequence[Any]) -> list[str]:
        """What the model reads: prompt + completion, or the chat template over both's messages."""
        if prompts and isinstance(prompts[0], list):
            return [self.tokenizer.apply_chat_template(list(p) + list(c), tokenize=False)
                    for p, c in zip(prompts, completions)]
        return [p + c for p, c in zip(prompts, completions)]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """One score per completion: the logit of the model's single label (index 0)."""
        device = next(self.model.parameters()).device
        inputs = self.tokenizer(text=self.texts(prompts, completions), return_tensors="pt", padding=True,
                                padding_side="right", add_special_tokens=False)
        with torch.inference_mode():
            logits = self.model(**{k: v.to(device) for k, v in inputs.items()}).logits
        return logits[:, 0].float().tolist()


def load_reward_model(spec: Any, tokenizer: Any = None, dtype: str = "float32", trust_remote_code: bool = False,
                      device: Any = None) -> RewardModel:
    """A :class:`RewardModel` from a model object, a local folder or a hub id (the hub cache
    first, offline; then the hub). ``tokenizer``: its tokenizer (default: loaded from the same
    place)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    name = None
    if isinstance(spec, torch.nn.Module):
        model = spec
    else:
        name = str(spec)
        if not Path(name).expanduser().is_dir() and not _HUB_ID.fullmatch(name):
            raise MissingPathError(f"reward model {name!r}: no such folder (a hub id is org/name)")
        kwargs = dict(num_labels=1, trust_remote_code=trust_remote_code,
                      dtype=torch.float32 if dtype in ("auto", None) else getattr(torch, str(dtype).replace("torch.", "")))
        model = _from_cache_or_hub(AutoModelForSequenceClassification, name, kwargs)
    if tokenizer is None:
        source = name or getattr(model.config, "_name_or_path", "")
        tokenizer = _from_cache_or_hub(AutoTokenizer, source, {"trust_remote_code": trust_remote_code})
    if device is not None:
        model = model.to(device)
    return RewardModel(model, tokenizer, name)


def _from_cache_or_hub(cls: Any, name: str, kwargs: dict) -> Any:
    """``cls.from_pretrained(name)``: offline from a folder or the hub cache, else from the hub."""
    try:
        return cls.from_pretrained(name, local_files_only=True, **kwargs)
    except (OSError, ValueError):
        pass
    try:
        return cls.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as e:
        raise UsageError(f"reward model {name!r}: cannot load it as a sequence-classification model "
                         f"(a local folder or a hub id; {type(e).__name__}: {str(e).splitlines()[0]})") from None
