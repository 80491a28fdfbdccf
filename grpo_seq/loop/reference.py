"""Moving the reference policy toward the trained one (TR-DPO, Gorbatovski et al. 2024,
arXiv 2404.09656; TRL's ``sync_ref_model``)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["mix_reference"]


@torch.no_grad()
def mix_reference(reference: nn.Module, policy: nn.Module, alpha: float) -> None:
    """Soft update, parameter by parameter: ``theta_ref <- alpha theta + (1 - alpha) theta_ref``
    (``alpha = 1``: a hard reset to the policy). Buffers are left as they are, as TRL does."""
    for ref_p, p in zip(reference.parameters(), policy.parameters(), strict=True):
        ref_p.mul_(1.0 - alpha).add_(p.detach().to(ref_p.dtype), alpha=alpha)
