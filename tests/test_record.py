"""--record: a GIF with one frame per step of the greedy episode."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pygame", reason="CartPole's renderer needs pygame: pip install -e '.[record]'")
from PIL import Image  # noqa: E402

from grpo_seq import CategoricalMLPPolicy  # noqa: E402
from grpo_seq.scoring.evaluation import PolicyEvaluator  # noqa: E402
from grpo_seq.io.record import record_episode  # noqa: E402
import forkrun  # tests/forkrun.py: Python programs forked from a warm process

ROOT = Path(__file__).resolve().parents[1]


def test_gif_has_one_frame_per_step_of_the_episode(tmp_path):
    torch.manual_seed(0)
    policy = CategoricalMLPPolicy(4, 2)
    with torch.no_grad():  # a policy that balances a while but falls: a short, known episode
        policy.net[-1].weight.mul_(300)
    info = record_episode(policy, "CartPole-v1", tmp_path / "a.gif", seed=5, scale=0.25)
    # The same greedy episode without rendering (one env of the evaluator, same seed).
    length = int(PolicyEvaluator("CartPole-v1", 1)(policy, seed=5)[0])
    assert 8 < length < 500
    with Image.open(tmp_path / "a.gif") as gif:
        assert gif.n_frames == info["frames"] == length == info["return"]
        assert gif.size == (150, 100)
        gif.seek(0)
        first = np.asarray(gif.convert("L"))
        gif.seek(length - 1)
        last = np.asarray(gif.convert("L"))
    assert (first[:14] != last[:14]).any()  # the step counter drawn at the top differs


def test_recipe_record_flag_writes_the_trained_agent(tmp_path):
    # GRPO_SEQ_QUICK: a smoke test's budget, which also cuts the recorded episode to 50 steps
    res = forkrun.run([sys.executable, str(ROOT / "recipes/cartpole.py"), "--total_env_steps", "1500",
                          "--eval_every", "1500", "--record", "--output_dir", str(tmp_path)], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1", "GRPO_SEQ_QUICK": "1"},
                      timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    video = json.loads((tmp_path / "summary.json").read_text())["record"]
    with Image.open(tmp_path / "agent.gif") as gif:
        assert gif.n_frames == video["frames"] == video["return"] <= 50
    assert f"greedy episode: {video['frames']} steps" in res.stdout
    assert (tmp_path / "curves.png").exists()


def test_mp4_goes_through_ffmpeg_when_it_is_installed(tmp_path, monkeypatch):
    # A stand-in ffmpeg that stores the raw frames it is piped: checks what we hand to the real one.
    fake = tmp_path / "bin/ffmpeg"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nfor a; do last="$a"; done\necho "$@" > "$last.args"\ncat > "$last"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    torch.manual_seed(0)
    policy = CategoricalMLPPolicy(4, 2)
    info = record_episode(policy, "CartPole-v1", tmp_path / "a.gif", seed=1, scale=0.25, fps=25)
    mp4 = Path(info["mp4"])
    assert mp4 == tmp_path / "a.mp4"
    assert mp4.stat().st_size == info["frames"] * 150 * 100 * 3  # every frame, rgb24, 150 x 100
    args = mp4.with_name("a.mp4.args").read_text().split()
    assert args[args.index("-s") + 1] == "150x100" and args[args.index("-r") + 1] == "25"
