"""The convolutional torso of a policy whose observations are images (Stable-Baselines3's
``CnnPolicy``): a flat observation back to its image, channels first, scaled, then convolved.

- Images of at least 36 x 36 pixels go through the Nature CNN (Mnih et al. 2015, as SB3's
  ``NatureCNN`` builds it): 32 8x8 filters stride 4, 64 4x4 stride 2, 64 3x3 stride 1, ReLU after
  each, flattened, a linear layer to 512 features, ReLU.
- Smaller ones (MinAtar's 10 x 10) cannot pass its first filter: one layer of 16 3x3 filters,
  stride 1, ReLU, flattened, a linear layer to 128 features, ReLU (the MinAtar paper's network).

``features`` sets the last layer's width instead (SB3's ``features_extractor_kwargs=dict(features_dim=N)``).

A ``Dict`` observation holding images (SB3's ``MultiInputPolicy``) goes through :class:`PartsTorso`:
each image part through its own torso (``features`` wide, SB3's ``cnn_output_dim``, 256 by
default), the other parts as they are, concatenated in key order (SB3's ``CombinedExtractor``).

An image whose smallest dimension comes last (height, width, channels: what gymnasium returns) is
transposed to channels first, as SB3's ``VecTransposeImage`` does; pixels are divided by
``scale`` (255 for a uint8 image, as SB3 normalises them).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

__all__ = ["ImageTorso", "PartsTorso", "is_image_shape", "channels_last", "CNN_OUTPUT_DIM"]

# SB3's CombinedExtractor: the width of each image part's features
CNN_OUTPUT_DIM = 256


def is_image_shape(shape: Sequence[int]) -> bool:
    """Three dimensions: one image (a stack of frames counts as its channels)."""
    return len(shape) == 3


def channels_last(shape: Sequence[int]) -> bool:
    """SB3's rule: channels come last when the last dimension is the smallest."""
    return shape[-1] < shape[0]


class ImageTorso(nn.Module):
    """``(n, prod(shape))`` flat observations -> ``(n, features)``."""

    def __init__(self, shape: Sequence[int], scale: float = 1.0, features: int | None = None):
        super().__init__()
        self.shape, self.scale, self.last = tuple(int(d) for d in shape), float(scale), channels_last(shape)
        c, h, w = (self.shape[2], self.shape[0], self.shape[1]) if self.last else self.shape
        if min(h, w) >= 36:
            convs = [nn.Conv2d(c, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(), nn.Conv2d(64, 64, 3, 1),
                     nn.ReLU()]
            self.features = 512
        else:
            convs = [nn.Conv2d(c, 16, 3, 1), nn.ReLU()]
            self.features = 128
        self.features = int(features) if features else self.features
        self.conv = nn.Sequential(*convs, nn.Flatten())
        flat = self.conv(torch.zeros(1, c, h, w)).shape[1]
        self.linear = nn.Sequential(nn.Linear(flat, self.features), nn.ReLU())

    def forward(self, obs: Tensor) -> Tensor:
        lead = obs.shape[:-1]
        image = obs.reshape(-1, *self.shape) / self.scale
        if self.last:
            image = image.permute(0, 3, 1, 2)
        return self.linear(self.conv(image)).reshape(*lead, self.features)


class PartsTorso(nn.Module):
    """A Dict observation flattened part after part, ``(n, sum(sizes))`` -> ``(n, features)``: a
    part with an ``image_shape`` through an :class:`ImageTorso` of ``features`` outputs (its pixels
    divided by the part's ``scale``), the others as they are."""

    def __init__(self, parts: Sequence[dict], features: int | None = None):
        super().__init__()
        self.sizes = [int(p["size"]) for p in parts]
        self.torsos = nn.ModuleList(
            ImageTorso(p["image_shape"], p.get("scale", 1.0), features or CNN_OUTPUT_DIM) if p.get("image_shape")
            else nn.Identity() for p in parts)
        self.features = sum(t.features if isinstance(t, ImageTorso) else size for t, size in zip(self.torsos, self.sizes))

    def forward(self, obs: Tensor) -> Tensor:
        return torch.cat([t(part) for t, part in zip(self.torsos, torch.split(obs, self.sizes, dim=-1))], dim=-1)
