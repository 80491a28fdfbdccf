"""The end-of-run disk line: the total, its parts, and how to make it smaller when Adam's state weighs."""

from __future__ import annotations

from grpo_seq.disk import disk_use_line


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
