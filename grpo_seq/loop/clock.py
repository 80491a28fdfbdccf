"""Phase timers that wait for the device."""

from __future__ import annotations

import time

import torch

__all__ = ["device_clock"]


def device_clock(device: torch.device) -> float:
    """``time.perf_counter()`` once ``device`` has finished the work queued on it: a GPU runs
    behind the Python that queues its kernels, so an unsynchronised phase timer would charge
    one phase's kernels to whichever later phase first waits for a result."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
