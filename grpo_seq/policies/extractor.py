"""A feature extractor of the user's own (Stable-Baselines3's ``features_extractor_class``) as the
policy's torso.

SB3 builds the extractor from the observation space as its policy sees it and calls it on
preprocessed observations: an image's channels first (``VecTransposeImage``) and uint8 pixels
divided by 255 (``normalize_images``), a discrete part one-hot, a ``Dict`` as a dict of its parts.
The policy here sees observations as flat float vectors (:class:`grpo_seq.sampling.spaces.SpaceCodec`,
discrete parts already one-hot), so this torso gives each batch back its shape, and an image its
channel order and scale, before the extractor reads it. The class is kept by import path (``"module:QualName"``), so that a
saved policy is built again without pickle.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn

from ..errors import UsageError
from ..sampling.spaces import SpaceCodec, space_from_json
from .image_torso import channels_last, is_image_shape

__all__ = ["ExtractorTorso", "saved_spec"]


def saved_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` as JSON: its class (given as a class in the program that builds it) as its import path."""
    cls = spec["class"]
    return {**spec, "class": cls if isinstance(cls, str) else f"{cls.__module__}:{cls.__qualname__}"}


def _import(path: str) -> type:
    module, _, name = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"features_extractor_class {path}: cannot be imported here ({e}); define it in a module the "
                         "loading program imports, or pass it: "
                         "GRPO.load(..., custom_objects={'features_extractor_class': cls})") from None
    return obj


class _View:
    """How one observation space's flat columns reach the extractor: their shape, and an image's
    channel order and scale (:meth:`space` is the space as SB3 shows it to the extractor)."""

    def __init__(self, space: Any, normalize_images: bool):
        self.size = SpaceCodec.obs_size(space, "observation")
        self.shape = tuple(space.shape) if space.shape and len(space.shape) > 1 else (self.size,)
        image = len(self.shape) == 3 and is_image_shape(self.shape) and space.dtype == np.uint8
        self.transpose = image and channels_last(self.shape)
        self.scale = 255.0 if image and normalize_images else 1.0
        self._space = space

    def space(self) -> Any:
        if not self.transpose:
            return self._space
        box = self._space
        return type(box)(low=box.low.transpose(2, 0, 1), high=box.high.transpose(2, 0, 1), dtype=box.dtype)

    def __call__(self, flat: Tensor) -> Tensor:
        x = flat.reshape(-1, *self.shape)
        if self.transpose:
            x = x.permute(0, 3, 1, 2)
        return x / self.scale if self.scale != 1.0 else x


class ExtractorTorso(nn.Module):
    """``(..., obs_dim)`` flat observations -> ``(..., features_dim)`` through the user's extractor.

    Args:
        spec: ``{"class": "module:QualName" (or the class itself), "kwargs": {...}, "space": <the
            observation space as JSON>, "normalize_images": bool}`` (saved with the policy as
            :func:`saved_spec`). A ``Dict`` space's extractor gets a dict of its parts, each as a
            lone space's would reach it.
    """

    def __init__(self, spec: dict[str, Any]):
        super().__init__()
        space, normalize = space_from_json(spec["space"]), bool(spec.get("normalize_images", True))
        if isinstance(space, spaces.Dict):
            self.views: dict[str, _View] | _View = {k: _View(part, normalize) for k, part in space.spaces.items()}
            shown: Any = spaces.Dict({k: v.space() for k, v in self.views.items()})
        else:
            self.views = _View(space, normalize)
            shown = self.views.space()
        cls = spec["class"] if isinstance(spec["class"], type) else _import(spec["class"])
        self.extractor = cls(shown, **spec.get("kwargs", {}))
        self.features = int(self.extractor.features_dim)

    def forward(self, flat: Tensor) -> Tensor:
        """``(..., obs_dim)`` -> ``(..., features_dim)``: a batch of one dimension reaches the extractor."""
        lead = flat.shape[:-1]
        if isinstance(self.views, dict):
            parts = torch.split(flat, [v.size for v in self.views.values()], dim=-1)
            x: Any = {k: view(part) for (k, view), part in zip(self.views.items(), parts)}
        else:
            x = self.views(flat)
        return self.extractor(x).reshape(*lead, self.features)
