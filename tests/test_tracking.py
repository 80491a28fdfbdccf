"""--report_to: trackers get the rows of metrics.jsonl under the same grouped names."""

from __future__ import annotations

import json

import pytest
import torch
from accelerate import Accelerator
from accelerate.tracking import GeneralTracker

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, LoopConfig, GRPOLoop
from grpo_seq.io.tracking import tracker_kwargs


class Recorder(GeneralTracker):
    """An in-memory tracker, standing in for TensorBoard or W&B."""

    name = "recorder"
    requires_logging_directory = False

    def __init__(self):
        super().__init__()
        self.config, self.rows, self.finished = None, [], False

    @property
    def tracker(self):
        return self

    def store_init_configuration(self, values):
        self.config = values

    def log(self, values, step=None, **kwargs):
        self.rows.append((step, dict(values)))

    def finish(self):
        self.finished = True


def test_trackers_get_every_row_with_the_same_grouped_names(tmp_path):
    rec = Recorder()
    torch.manual_seed(0)
    cfg = LoopConfig(num_generations=2, num_groups=1, beta=0.0, output_dir=str(tmp_path), report_to=[])
    trainer = GRPOLoop(cfg, CategoricalMLPPolicy(4, 2), EnvGroupSampler("CartPole-v1", 1, 2),
                          Accelerator(cpu=True, log_with=[rec]))
    for _ in range(3):
        trainer.step()
    trainer.log({"step": trainer.step_count, "eval/return": 12.0})
    trainer.close()
    lines = [json.loads(ln) for ln in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], {k: v for k, v in r.items() if k != "step"}) for r in lines] == rec.rows
    names = {k for _, row in rec.rows for k in row}
    assert {n.split("/")[0] for n in names} == {"reward", "loss", "policy", "perf", "eval"}
    assert rec.config["num_generations"] == 2 and rec.config["report_to"] == "[]"  # lists as text
    assert rec.finished


def test_a_statistic_of_no_scored_token_is_null_in_the_file_and_left_out_of_trackers(tmp_path):
    rec = Recorder()
    cfg = LoopConfig(num_generations=2, num_groups=1, beta=0.0, output_dir=str(tmp_path))
    trainer = GRPOLoop(cfg, CategoricalMLPPolicy(4, 2), EnvGroupSampler("CartPole-v1", 1, 2),
                          Accelerator(cpu=True, log_with=[rec]))
    trainer.log({"step": 1, "policy/entropy": float("nan"), "reward/mean": 3.0})
    trainer.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 1, "policy/entropy": None, "reward/mean": 3.0}
    assert rec.rows == [(1, {"reward/mean": 3.0})]


def test_a_tracker_whose_package_is_missing_is_named(monkeypatch):
    import accelerate.tracking

    monkeypatch.setattr(accelerate.tracking, "get_available_trackers", lambda: [])
    with pytest.raises(ValueError, match=r"LoopConfig.report_to: --report_to wandb: the wandb package is not "
                                         r"installed \(pip install wandb\)"):
        LoopConfig(report_to=["wandb"])
    with pytest.raises(ValueError, match="unknown tracker"):
        tracker_kwargs(["tensorbored"], None)
    assert tracker_kwargs(["none"], "x") == {}
