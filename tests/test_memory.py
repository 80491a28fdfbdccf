"""retain_freed_memory: opt-in, and a freed block is then reused without page faults (each check in
a fresh process, since the setting is process-wide and the LM recipe tests turn it on)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from grpo_seq import LoopConfig

FAULTS = """
import json, resource, torch

def faults_of_a_fresh_block(mib):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(mib * 2**20 // 4)  # written on allocation, freed at once
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
"""

SCRIPT = FAULTS + """
from grpo_seq.io.memory import retain_freed_memory

default = faults_of_a_fresh_block(32)
retained = retain_freed_memory()
faults_of_a_fresh_block(64)
print(json.dumps({"default": default, "retained": retained, "after": faults_of_a_fresh_block(32)}))
"""


def run(script: str) -> dict:
    """The JSON that ``script`` prints, run in a new interpreter."""
    return json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)


TRAINER = FAULTS + """
from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, LoopConfig, GRPOLoop

cfg = LoopConfig(num_groups=1, num_generations=2, beta=0.0)
GRPOLoop(cfg, CategoricalMLPPolicy(4, 2), EnvGroupSampler("CartPole-v1", 1, 2, seed=0))
faults_of_a_fresh_block(64)
print(json.dumps({"after": faults_of_a_fresh_block(32)}))
"""


def test_the_config_has_no_process_wide_memory_switch():
    assert not hasattr(LoopConfig(), "retain_freed_memory")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_building_a_trainer_leaves_malloc_at_its_default():
    # With the default settings a fresh 32 MiB block is a fresh mmap: thousands of page faults.
    assert run(TRAINER)["after"] > 1000


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_a_freed_block_is_reused_without_page_faults():
    out = run(SCRIPT)
    assert out["default"] > 1000  # glibc's default: 32 MiB from a fresh mmap, about 8k 4-KiB pages
    assert out["retained"] is True
    # The 64 MiB block stays in the heap after its free, so a block that fits in it faults
    # nothing in. (Not one of the very same size: torch asks for aligned blocks, and glibc's
    # alignment needs a few bytes more than the freed block has.)
    assert out["after"] < out["default"] / 10
