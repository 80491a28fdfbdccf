"""Run under `accelerate launch --multi_gpu --num_processes 2` with ``<out>``: recipes/cartpole.py
as its users launch it, with minibatches of env steps, into <out>/recipe; then the same run resumed
from its last checkpoint with 2,000 env steps more. Before the resume, rank 0 keeps the first run's
summary, metrics and checkpoint file names beside it (first_*.json*)."""

import json
import runpy
import shutil
import sys
from pathlib import Path

import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[2]
run = Path(sys.argv[1]) / "recipe"
# --obs_norm: the processes pool their observations' moments, and the resume takes them back
common = ["--eval_every", "2000", "--minibatch_tokens", "64", "--num_groups", "2", "--num_generations", "4", "--obs_norm"]


def recipe(*args: str) -> None:
    sys.argv = [str(ROOT / "recipes/cartpole.py"), *common, *args]
    runpy.run_path(sys.argv[0], run_name="__main__")
    dist.barrier()  # rank 0 wrote the summary


recipe("--total_env_steps", "4000", "--output_dir", str(run))
summary = json.loads((run / "summary.json").read_text())
if dist.get_rank() == 0:
    shutil.copy(run / "summary.json", run / "first_summary.json")
    shutil.copy(run / "metrics.jsonl", run / "first_metrics.jsonl")
    (ckpt,) = (run / "checkpoints").iterdir()
    (run / "first_checkpoint.json").write_text(json.dumps(sorted(p.name for p in ckpt.iterdir())))
dist.barrier()
recipe("--total_env_steps", str(summary["env_steps"] + 2000), "--resume_from", str(run))
