"""``--obs_norm``: the policy's observation units follow the running mean and standard deviation of
every real observation the run has trained on, as Stable-Baselines3's ``VecNormalize`` does for
its policy (rl-zoo3 normalises so for PPO on MuJoCo).

A policy's fixed units come from random play (:mod:`grpo_seq.envs.obs_scale`): a running cheetah
meets velocities far outside what a flailing one does, and its inputs drift out of the range its
first layer was trained on. Here the units move after each update, before the next rollout: a
rollout, its old log-probs and its update all see the same units, and the policy saved (its
``policy.json``) holds the units its weights were last trained in. Processes pool their batches'
moments, so their policies stay equal. Observations are not clipped (``VecNormalize`` clips them
at 10 standard deviations); a dimension that has never moved keeps a unit of 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from ..io import checkpoint as ckpt
from ..math.batch import RolloutBatch
from ..math.running_moments import RunningMoments

__all__ = ["ObsNorm", "saved_moments"]

# a standard deviation under this is a dimension that has not moved: it keeps a unit of 1
_STILL = 1e-6


class ObsNorm:
    """Moves ``policy``'s observation units (``set_obs_units``) to the running moments of the
    observations of every batch it :meth:`observe` s (all processes' through ``accelerator``)."""

    def __init__(self, policy: nn.Module, accelerator: Any):
        self.policy = getattr(policy, "module", policy)
        if not callable(getattr(self.policy, "set_obs_units", None)) or "image_shape" in self.policy.init_kwargs \
                or "obs_parts" in self.policy.init_kwargs:
            raise ConfigError("--obs_norm: for observations of numbers; this env's are images (their pixels are "
                              "scaled by 255) or its policy keeps its own units, got True")
        self.accelerator = accelerator
        self.moments = RunningMoments()

    def observe(self, batch: RolloutBatch) -> None:
        """Take in ``batch``'s real observations (its mask's steps, on every process), then set the units."""
        obs = batch.context[batch.mask].to("cpu", torch.float64)
        sums = torch.cat([torch.tensor([float(len(obs))], dtype=torch.float64), obs.sum(0), (obs ** 2).sum(0)])
        if self.accelerator.num_processes > 1:
            sums = self.accelerator.reduce(sums.to(self.accelerator.device), reduction="sum").cpu()
        n, dim = float(sums[0]), (len(sums) - 1) // 2
        if n > 0:
            mean = sums[1 : 1 + dim].numpy() / n
            m2 = np.maximum(sums[1 + dim :].numpy() - n * mean ** 2, 0.0)
            self.moments.merge(n, mean, m2)
            self._apply()

    def _apply(self) -> None:
        std = np.sqrt(self.moments.var)
        self.policy.set_obs_units(self.moments.mean.tolist(), np.where(std < _STILL, 1.0, std).tolist())

    def state_dict(self) -> dict[str, Any]:
        return self.moments.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """The moments of a checkpoint, and the units they give (before its weights load: they were trained in them)."""
        if state and state.get("count"):
            self.moments = RunningMoments.from_state(state)
            self._apply()


def saved_moments(resume_from: str) -> dict[str, Any] | None:
    """The moments an env run's checkpoint (``--resume_from``: a checkpoint or run folder) saved."""
    state = ckpt.read_json(ckpt.resolve_checkpoint(resume_from) / "trainer_state.json")
    extra = state.get("extra") if isinstance(state, dict) else None
    return extra.get("obs_moments") if isinstance(extra, dict) else None
