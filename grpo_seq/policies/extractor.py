"""A feature extractor of the user's own (Stable-Baselines3's ``features_extractor_class``) as the
policy's torso.

SB3 builds the extractor from the observation space as its policy sees it and calls it on
preprocessed observations: an image's channels first (``VecTransposeImage``) and uint8 pixels
divided by 255 (``normalize_images``), a discrete part one-hot. The policy here sees observations
as flat float vectors (:class:`grpo_seq.sampling.spaces.SpaceCodec`, discrete parts already
one-hot), so this torso gives each batch back its shape, and an image its channel order and scale,
before the extractor reads it. The class is kept by import path (``"module:QualName"``), so that a
saved policy is built again without pickle.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
from torch import Tensor, nn

from ..errors import UsageError
from ..sampling.spaces import space_from_json
from .image_torso import channels_last, is_image_shape

__all__ = ["ExtractorTorso"]


def _import(path: str) -> type:
    module, _, name = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"features_extractor_class {path}: cannot be imported here ({e}); define it in a module the "
                         "loading program imports") from None
    return obj


class ExtractorTorso(nn.Module):
    """``(n, obs_dim)`` flat observations -> ``(n, features_dim)`` through the user's extractor.

    Args:
        spec: ``{"class": "module:QualName", "kwargs": {...}, "space": <the observation space as
            JSON>, "normalize_images": bool}``, JSON-able (saved with the policy).
    """

    def __init__(self, spec: dict[str, Any]):
        super().__init__()
        space = space_from_json(spec["space"])
        self.shape = tuple(space.shape) if space.shape else None
        self.image = self.shape is not None and is_image_shape(self.shape) and space.dtype == np.uint8
        self.transpose = self.image and channels_last(self.shape)
        self.scale = 255.0 if self.image and spec.get("normalize_images", True) else 1.0
        if self.transpose:  # the space as SB3's VecTransposeImage shows it to the extractor
            h, w, c = self.shape
            space = type(space)(low=0, high=255, shape=(c, h, w), dtype=space.dtype)
        self.extractor = _import(spec["class"])(space, **spec.get("kwargs", {}))
        self.features = int(self.extractor.features_dim)

    def forward(self, flat: Tensor) -> Tensor:
        """``(..., obs_dim)`` -> ``(..., features_dim)``: a batch of one dimension reaches the extractor."""
        lead = flat.shape[:-1]
        x = flat.reshape(-1, *(self.shape if self.shape and len(self.shape) > 1 else flat.shape[-1:]))
        if self.transpose:
            x = x.permute(0, 3, 1, 2)
        return self.extractor(x / self.scale if self.scale != 1.0 else x).reshape(*lead, self.features)
