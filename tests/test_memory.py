"""retain_freed_memory: a freed block is reused without page faults (in a fresh process, since
the setting is process-wide and the trainer tests turn it on)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

SCRIPT = """
import json, resource, torch
from grpo_seq.memory import retain_freed_memory

def faults_of_a_fresh_block(mib):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(mib * 2**20 // 4)  # written on allocation, freed at once
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

default = faults_of_a_fresh_block(32)
retained = retain_freed_memory()
faults_of_a_fresh_block(64)
print(json.dumps({"default": default, "retained": retained, "after": faults_of_a_fresh_block(32)}))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_a_freed_block_is_reused_without_page_faults():
    out = json.loads(subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout)
    assert out["default"] > 1000  # glibc's default: 32 MiB from a fresh mmap, about 8k 4-KiB pages
    assert out["retained"] is True
    # The 64 MiB block stays in the heap after its free, so a block that fits in it faults
    # nothing in. (Not one of the very same size: torch asks for aligned blocks, and glibc's
    # alignment needs a few bytes more than the freed block has.)
    assert out["after"] < out["default"] / 10
