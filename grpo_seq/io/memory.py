"""Keeping freed memory inside the process, so each step's tensors land on pages already mapped.

Opt-in and process-wide: the language-model job calls :func:`retain_freed_memory` only when its
spec asks (``retain_freed_memory``, off by default); a program that owns its process may too.
"""

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

    A training step allocates its activations, frees them after the backward pass, then samples
    for a while. By default glibc returns that memory to the kernel, and the next step faults
    every page back in; on a virtual machine whose host reclaims the guest's free memory, each
    of those faults is a host fault, and the system time adds up. With this setting the next
    step's tensors land on pages already mapped. The peak RSS is unchanged (it is reached inside
    every step anyway), but the RSS stays near that peak between steps.

    Opt-in: the library never calls it. It changes malloc for the whole process, every library
    in it included, so a program calls it only when it owns the process (as the LM recipe does
    with ``--retain_freed_memory``). Idempotent; a no-op (returning False) where the C library
    is not glibc.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    # mallopt returns 1 on success; -1 as the trim threshold means "never trim" (mallopt(3)).
    return bool(libc.mallopt(_M_TRIM_THRESHOLD, -1) == 1 and libc.mallopt(_M_MMAP_MAX, 0) == 1)
