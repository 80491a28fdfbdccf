"""Keeping freed memory inside the process, so each step's tensors land on pages already mapped."""

from __future__ import annotations

import ctypes
import functools
import platform

__all__ = ["retain_freed_memory"]

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_MAX = -4


@functools.cache
def retain_freed_memory() -> bool:
    """Tell glibc's malloc to keep what the process frees: no trimming of the heap, and no
    separate ``mmap`` per large block (which ``free`` hands straight back to the kernel).

    A training step allocates its activations (about 2 GB for SmolLM2-135M on 8 x 230 tokens),
    frees them after the backward pass, then samples for seconds. By default glibc returns
    that memory to the kernel, and the next step faults every page back in: on a virtual
    machine whose host reclaims the guest's free memory, each of those faults is a host fault.
    Measured on this project's 2-core VM, fp32 SmolLM2 steps with beta 0.04: 0.1 to 0.5 million
    page faults and 0.4 to 5.5 s of system time a step, against 0 to 0.05 million and 0.1 to 0.8 s
    with this; peak RSS unchanged (5.27 to 5.28 GiB either way), since the peak is reached inside
    every step anyway. The RSS stays near that peak between steps.

    Process-wide and idempotent; a no-op (returning False) where the C library is not glibc.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    # mallopt returns 1 on success; -1 as the trim threshold means "never trim" (mallopt(3)).
    return bool(libc.mallopt(_M_TRIM_THRESHOLD, -1) == 1 and libc.mallopt(_M_MMAP_MAX, 0) == 1)
