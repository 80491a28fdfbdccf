"""grpo-seq plot on metrics files written here."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="plots need matplotlib: pip install -e '.[plot]'")

from grpo_seq.io.plot import panels_for, plot_runs  # noqa: E402
import forkrun  # tests/forkrun.py: Python programs forked from a warm process

ROOT = Path(__file__).resolve().parents[1]


def write_run(folder: Path, steps: int, scale: float, lm: bool) -> Path:
    folder.mkdir(parents=True)
    rows = []
    for s in range(1, steps + 1):
        row = {"step": s, "perf/tokens_total": 100 * s, "reward/mean": scale * s, "reward/std": 1.0,
               "policy/kl": 0.01 * s, "policy/completion_length": 50 + s, "policy/clip_fraction": 0.1,
               "policy/entropy": 1.0 / s, "loss/policy": -0.1, "perf/step_seconds": 1.0}
        if lm:
            row.update({"reward/correctness_reward": 0.1 * s, "reward/format_reward": 0.2})
        rows.append(row)
        if not lm and s % 5 == 0:
            rows.append({"step": s, "perf/tokens_total": 100 * s, "eval/return": 10.0 * s, "eval/seed": 7})
    text = "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 99, "reward/me'  # a line cut by a kill
    (folder / "metrics.jsonl").write_text(text)
    return folder


def test_panels_follow_what_the_runs_logged(tmp_path):
    cart = write_run(tmp_path / "cart", 10, 1.0, lm=False)
    lm = write_run(tmp_path / "lm", 10, 0.1, lm=True)
    out = tmp_path / "both.png"
    titles = plot_runs([cart, lm], out, x="env_steps")
    # reward (with each function), eval return, accuracy, KL, length, clip fraction, entropy, loss
    assert titles == ["reward", "evaluation return", "accuracy (correctness reward)", "KL to the reference",
                      "completion length (tokens)", "clip fraction", "entropy", "policy loss"]
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 30_000
    assert dict(panels_for([[{"step": 1, "reward/mean": 1.0, "reward/mine": 2.0}]]))["reward"] == ["reward/mean", "reward/mine"]


def test_panels_leave_out_counters_and_quantities_that_stayed_zero():
    # an env run with beta = 0 and one update per batch: KL and clip fraction are 0 throughout
    rows = [{"step": i, "reward/mean": float(i), "reward/env_return": float(i), "reward/flat_steps_in_a_row": 1.0,
             "policy/kl": 0.0, "policy/clip_fraction": 0.0, "policy/entropy": 0.6} for i in range(1, 4)]
    panels = dict(panels_for([rows]))
    assert panels["reward"] == ["reward/mean", "reward/env_return"]
    assert "KL to the reference" not in panels and "clip fraction" not in panels and "entropy" in panels
    # a quantity another run moved is drawn for both
    other = [{**r, "policy/kl": 0.01} for r in rows]
    assert "KL to the reference" in dict(panels_for([rows, other]))


def test_the_command_writes_a_png_with_one_panel_per_logged_quantity(tmp_path):
    cart = write_run(tmp_path / "cart", 12, 1.0, lm=False)
    res = forkrun.run([sys.executable, "-m", "grpo_seq.cli.commands", "plot", str(cart), "--smooth", "3"], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "7 panels (reward, evaluation return, KL to the reference" in res.stdout
    png = cart / "curves.png"
    from PIL import Image

    with Image.open(png) as im:  # 3 columns x 3 rows of 5.2 x 3.6 inch panels at 100 dpi
        assert im.size == (1560, 1080)
    res = forkrun.run([sys.executable, "-m", "grpo_seq.cli.commands", "plot", str(tmp_path / "nothing")], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert res.returncode == 2 and "no metrics.jsonl" in res.stderr
