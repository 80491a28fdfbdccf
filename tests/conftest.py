import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny MLPs run as fast on one thread, and results then do not depend on the core count.
    torch.set_num_threads(1)
