"""``device`` as SB3 reads it: "auto" is a GPU where torch sees one. The GPU itself is checked on a
machine that has one; here torch's answer is faked, so only the choice is tested."""

from __future__ import annotations

import pytest
import torch

from grpo_seq.sb3.model import ModelDeviceAccelerator, _recommend_cpu
from grpo_seq.sb3.policy import sb3_device


@pytest.mark.parametrize("gpu, asked, expected", [
    (True, "auto", "cuda"), (False, "auto", "cpu"),   # SB3's get_device("auto")
    (False, "cuda", "cpu"),                            # a GPU asked for where there is none: the CPU, as SB3
    (True, "cpu", "cpu"), (True, "cuda", "cuda"),
])
def test_device_choice_follows_sb3(monkeypatch, gpu, asked, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    assert sb3_device(asked).type == expected


def test_an_mlp_on_a_gpu_gets_sb3s_advice_and_the_cpu_none():
    with pytest.warns(UserWarning, match="device='cpu'"):
        _recommend_cpu(torch.device("cuda"), "MlpPolicy")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _recommend_cpu(torch.device("cpu"), "MlpPolicy")


def test_the_accelerator_answers_the_models_device_and_places_nothing():
    # "meta" stands for a device other than the process's accelerate state (the CPU here): the
    # accelerator reports it, and prepare leaves a CPU model where it is (placing would move it there)
    acc = ModelDeviceAccelerator(torch.device("meta"))
    model = acc.prepare(torch.nn.Linear(2, 2))
    assert acc.device == torch.device("meta") and next(model.parameters()).device.type == "cpu"
