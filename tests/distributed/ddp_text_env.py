"""Run under `accelerate launch --multi_gpu --num_processes 2`: a text-env job (the tiny language
model guessing a digit) for two steps; every rank writes, per step, the seed each of its
environments was reset with, each episode's group, its reply tokens and the step's
perf/tokens_total, and its parameters at the end, to <out>/text_env_rank<r>.json."""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "text_env"))  # guess_env, as a user's module

from grpo_seq.jobs import JobCallbacks, TextEnvJob  # noqa: E402
from grpo_seq.jobs.text_env import run_text_env_job  # noqa: E402

model, out = sys.argv[1], Path(sys.argv[2])


class Record(JobCallbacks):
    def __init__(self):
        self.steps = []

    def on_step(self, run, metrics):
        batch = run.trainer.last_batch
        self.steps.append({"seeds": [int(env.np_random_seed) for env in run.trainer.sampler.envs],
                           "group": batch.group.tolist(), "num_generations": batch.num_generations,
                           "reply_tokens": int(batch.lengths().sum()), "tokens_total": metrics["perf/tokens_total"]})

    def on_end(self, run, summary):
        rank = run.accelerator.process_index
        params = torch.cat([p.detach().flatten() for p in run.trainer.policy.parameters()])
        (out / f"text_env_rank{rank}.json").write_text(json.dumps({
            "world": run.accelerator.num_processes, "steps": self.steps, "params": params.tolist()}))


spec = TextEnvJob(model=model, env_id="guess_env:GuessDigit-v0", env_kwargs='{"high": 9}', num_groups=2,
                  num_generations=3, max_steps=2, max_turns=2, max_completion_length=3, torch_threads=1,
                  output_dir=str(out / "run"))
run_text_env_job(spec, Record())
