"""The coefficient of the token-mean entropy bonus (``ent_coef`` with ``ent_mean="token"``: TRL's
``entropy_coef``), fixed or adaptive (Skywork-OR1,
arXiv 2505.22312, section 4: TRL 1.16's ``use_adaptive_entropy``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["EntropyControl"]


@dataclass
class EntropyControl:
    """The entropy coefficient ``c`` and, when ``adaptive``, its controller: after each optimizer
    step with token-mean entropy ``H``, ``c <- min(c + delta, c_max)`` if ``H <= target`` else
    ``max(c - delta, c_min)``; the bonus is applied only while the last measured ``H <= target``
    (none measured yet: not applied). Fixed, ``c`` is always applied."""

    coef: float = 0.0
    adaptive: bool = False
    target: float = 0.2
    delta: float = 0.005
    coef_min: float = 0.0
    coef_max: float = 1.0
    last_entropy: float = math.inf

    @classmethod
    def from_config(cls, config: Any) -> "EntropyControl":
        coef = config.ent_coef if config.ent_mean == "token" else 0.0
        return cls(coef=coef, adaptive=config.use_adaptive_entropy, target=config.entropy_target,
                   delta=config.ent_coef_delta, coef_min=config.ent_coef_min, coef_max=config.ent_coef_max)

    @property
    def active(self) -> bool:
        return self.coef != 0.0 or self.adaptive

    def applied(self) -> float:
        """The coefficient this optimizer step's loss uses."""
        if self.adaptive and not self.last_entropy <= self.target:
            return 0.0
        return self.coef

    def update(self, entropy: float) -> None:
        """Move the coefficient after an optimizer step whose trained tokens had mean entropy ``entropy``."""
        if not self.adaptive:
            return
        if entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.coef_max)
        else:
            self.coef = max(self.coef - self.delta, self.coef_min)
        self.last_entropy = entropy
