"""TRL's ``reward_funcs`` and ``reward_processing_classes``: functions, import paths and reward
models (a hub id, a local folder or a sequence-classification model object), as TRL takes them."""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from ..scoring.reward_model import is_reward_model_spec, load_reward_model

__all__ = ["load_reward_funcs"]


def load_reward_funcs(reward_funcs: Any, reward_processing_classes: Any, dtype: str = "float32",
                      trust_remote_code: bool = False, device: Any = None) -> tuple[list, list, list]:
    """``(reward_funcs, reward_processing_classes, scorer_fns)`` as TRL's trainer holds them: each
    reward model loaded (``PreTrainedModel``) beside its tokenizer, a function with ``None``; and
    the callables :class:`grpo_seq.scoring.rewards.RewardScorer` runs (a :class:`RewardModel` for a model).
    A model is frozen, in eval mode, on ``device``."""
    fns = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs] if reward_funcs else []
    if not fns:
        raise UsageError("GRPOTrainer: No reward source provided: give reward_funcs (a function, an import path "
                         "'package.module:function', a reward model's hub id or folder, or a list of them)")
    classes = _processing_classes(reward_processing_classes, len(fns))
    models, scorer_fns = [], []
    for fn, tokenizer in zip(fns, classes):
        if is_reward_model_spec(fn):
            scorer = load_reward_model(fn, tokenizer, dtype, trust_remote_code, device)
            models.append(scorer.model)
            classes[len(models) - 1] = scorer.tokenizer
            scorer_fns.append(scorer)
        else:
            models.append(fn)
            scorer_fns.append(fn)
    return models, classes, scorer_fns


def _processing_classes(given: Any, n: int) -> list:
    """One tokenizer (or None) per reward function; one given bare stands for a single function."""
    if given is None:
        return [None] * n
    classes = list(given) if isinstance(given, (list, tuple)) else [given]
    if len(classes) != n:
        raise UsageError(f"GRPOTrainer: the number of reward_processing_classes ({len(classes)}) must match the number "
                         f"of reward_funcs ({n})")
    return classes
