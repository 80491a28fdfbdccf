"""The end-of-run disk line: the total, its parts, and how to make it smaller when Adam's state weighs;
the checks made before writing: room for a checkpoint, an output folder that can be made."""

from __future__ import annotations

import errno
import shutil

import pytest
import torch

from grpo_seq.io.checkpoint import checkpoint_bytes
from grpo_seq.io.disk import check_free_space, check_output_dir, disk_use_line
from grpo_seq.errors import UsageError


def _write(path, size):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def test_the_optimizers_share_is_named_with_the_option_that_drops_it(tmp_path):
    _write(tmp_path / "model" / "model.safetensors", 1000)
    _write(tmp_path / "checkpoints" / "step_00000001" / "optimizer.pt", 2000)
    line = disk_use_line(tmp_path)
    # 3.0 KB in all; optimizer.pt is 2.0 KB of it
    assert f"{tmp_path} holds 3.0 KB (checkpoints 2.0 KB, model 1.0 KB" in line
    assert "2.0 KB of it is the optimizer's state, which --save_optimizer false leaves out" in line


def test_no_hint_without_optimizer_state(tmp_path):
    _write(tmp_path / "model" / "model.safetensors", 1000)
    assert "--save_optimizer" not in disk_use_line(tmp_path)


def test_a_write_larger_than_the_free_space_is_refused_as_enospc_naming_the_target(tmp_path, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=1500))
    target = tmp_path / "checkpoints" / "step_00000002"  # not made yet: its nearest folder is asked
    check_free_space(target, 1500, "checkpoint step_00000002")
    with pytest.raises(OSError) as info:
        check_free_space(target, 1501, "checkpoint step_00000002")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert info.value.strerror == "checkpoint step_00000002 needs at least 1.5 KB, 1.5 KB are free"
    assert not (tmp_path / "checkpoints").exists()


def test_a_checkpoints_size_counts_weights_once_and_adams_two_moments():
    from grpo_seq.policies import CategoricalMLPPolicy

    policy = CategoricalMLPPolicy(obs_dim=4, num_actions=2, hidden_sizes=(8,))
    weights = sum(p.numel() * 4 for p in policy.parameters())
    opt = torch.optim.Adam(policy.parameters())
    assert checkpoint_bytes(policy, opt.state_dict()) == weights  # no state before the first step
    sum(p.sum() for p in policy.parameters()).backward()
    opt.step()
    steps = 4 * len(list(policy.parameters()))  # Adam's float32 step counter, one a parameter
    assert checkpoint_bytes(policy, opt.state_dict()) == 3 * weights + steps
    tied = torch.nn.Linear(4, 4, bias=False)
    twin = torch.nn.Module()
    twin.a, twin.b = tied, tied
    assert checkpoint_bytes(twin, None) == 4 * 4 * 4  # one storage, saved once


@pytest.mark.parametrize("under, said", [("f", "is a file, not a folder"), ("f/run", "would be inside")])
def test_an_output_dir_that_cannot_be_a_folder_is_refused_naming_the_option(tmp_path, under, said):
    (tmp_path / "f").write_text("x")
    out = tmp_path / under
    with pytest.raises(UsageError, match=f"^--output_dir {out}: .*{said}"):
        check_output_dir(out)
    check_output_dir(tmp_path / "new" / "run")  # a folder that can be made passes, and is not made
    assert not (tmp_path / "new").exists()
