"""Shared test set-up. The tests mirror the package: tests/sampling/ for grpo_seq/sampling/, and
so on; tests/recipes/, tests/benchmarks/ and tests/distributed/ run the scripts, tests/faults/
tries bad input and faults on purpose."""

import sys
from pathlib import Path

import pytest
import torch

# tiny_lm.py (a tiny language model built from a config) is imported by tests in every folder.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny MLPs run as fast on one thread, and results then do not depend on the core count.
    torch.set_num_threads(1)
