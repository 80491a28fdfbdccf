"""The GRPO family's recipes on a language model: training reward, held-out accuracy and seconds a step.

    python benchmarks/lm_family_ablation.py --seeds 0-3                 # letter_counting, 20 steps a run
    python benchmarks/lm_family_ablation.py --seeds 4-7                 # more seeds: extends the record
    python benchmarks/lm_family_ablation.py --summarise                 # recompute the summary, run nothing

The language-model half of benchmarks/family_ablation.py: the same paper recipes (``VARIANTS``,
imported from there) over the LM program's defaults, on a reasoning-gym task with headroom
(SmolLM2-135M-Instruct solves about a fifth of letter_counting's held-out items greedily; on GSM8K
it solves about 1%, so 20 steps there move only the answer format). Each run trains --steps steps
(--groups prompts x --G completions, --tokens new tokens, beta 0.04) from one seed, then answers
--eval_n held-out items greedily with the task's scorer, full marks only, as
benchmarks/lm_learning_per_minute.py does (the same items for every run; the base model is
evaluated once). Recorded per run: the mean training reward over all steps and over the last 5,
held-out accuracy, the median seconds a step, and dynamic sampling's groups dropped. Seeds run in
the outer loop and variants in the inner one; a run already in the record is skipped. The summary
holds per variant the means over seeds and, against the defaults, a paired bootstrap interval of
the difference in held-out accuracy. Writes benchmarks/results/lm_family_ablation/result.json.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)
from family_ablation import BOOTSTRAP, VARIANTS  # noqa: E402
from lm_learning_per_minute import MODEL, task_setup  # noqa: E402

RECORD = record.default_out("lm_family_ablation")


def train_and_evaluate(a: argparse.Namespace, variant: str, seed: int, setup: tuple) -> dict:
    """One run of ``variant`` from ``seed``: its training rewards, step seconds and held-out accuracy."""
    from grpo_seq.jobs import JobCallbacks
    from grpo_seq.jobs.lm import run_lm_job
    from grpo_seq.jobs.lm_spec import LMJob

    fields, fns, held, tokens, metric = setup
    steps: list[dict] = []
    accuracy: list[float] = []

    class Watch(JobCallbacks):
        def on_step(self, run, metrics) -> bool:
            steps.append(metrics)
            if len(steps) == a.steps:  # the trained policy, before the job lets it go
                accuracy.append(evaluate(a, run.trainer.policy.model, run.trainer.policy.tokenizer, held, fns,
                                         tokens, metric))
            return False

    cfg = LMJob(model=a.model, output_dir=str(a.scratch / f"{variant}_{seed}"), max_steps=a.steps, seed=seed,
                num_generations=a.G, num_groups=a.groups, learning_rate=a.lr, beta=a.beta, temperature=a.temperature,
                torch_threads=a.threads, use_cpu=True, log_completions_every=0, save_steps=0, overwrite=True,
                **fields, **VARIANTS[variant], **a.over)
    run_lm_job(cfg, [Watch()], reward_funcs=fns, label="lm_family_ablation")
    shutil.rmtree(cfg.output_dir, ignore_errors=True)  # its saved model: half a GB a run, and the record has the figures
    rewards = [m["reward/mean"] for m in steps]
    return {"variant": variant, "seed": seed, "accuracy": accuracy[0], "reward_mean": statistics.fmean(rewards),
            "reward_last5": statistics.fmean(rewards[-5:]), "rewards": rewards,
            "step_seconds": statistics.median(m["perf/step_seconds"] for m in steps),
            "groups_dropped": sum(m.get("dynamic_sampling/groups_dropped", 0.0) for m in steps)}


def evaluate(a: argparse.Namespace, model, tokenizer, held: list, fns: list, tokens: int, metric: str) -> float:
    """Held-out accuracy: greedy answers scored by the task's own scorer."""
    from grpo_seq.jobs.eval_lm import score_greedy
    from grpo_seq.scoring.rewards import RewardScorer

    metrics, _ = score_greedy(model, tokenizer, held, RewardScorer(fns), tokens, a.eval_batch)
    return float(metrics[metric])


def base_accuracy(a: argparse.Namespace, setup: tuple) -> float:
    from grpo_seq.io.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(a.model)
    _, fns, held, tokens, metric = setup
    return evaluate(a, model, tokenizer, held, fns, tokens, metric)


def summarise(result: dict) -> dict:
    """Per variant: runs, mean held-out accuracy and training rewards, median step seconds, and
    against the defaults (paired by seed) the mean difference in accuracy with a 95% bootstrap interval."""
    by = {v: {r["seed"]: r for r in result["runs"] if r["variant"] == v} for v in VARIANTS}
    rng, out = random.Random(0), {}
    for v, runs in by.items():
        if not runs:
            continue
        row = {"runs": len(runs), "accuracy": statistics.fmean(r["accuracy"] for r in runs.values()),
               "reward_mean": statistics.fmean(r["reward_mean"] for r in runs.values()),
               "reward_last5": statistics.fmean(r["reward_last5"] for r in runs.values()),
               "step_seconds": statistics.median(r["step_seconds"] for r in runs.values())}
        paired = [runs[s]["accuracy"] - by["defaults"][s]["accuracy"] for s in runs if s in by["defaults"]]
        if v != "defaults" and len(paired) > 1:
            means = sorted(statistics.fmean(rng.choices(paired, k=len(paired))) for _ in range(BOOTSTRAP))
            row["accuracy_diff"] = statistics.fmean(paired)
            row["accuracy_diff_ci"] = [means[int(0.025 * BOOTSTRAP)], means[int(0.975 * BOOTSTRAP) - 1]]
        out[v] = row
    return out


def seed_list(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="letter_counting", help="reasoning-gym task[:JSON options] (one)")
    ap.add_argument("--seeds", default="0-3", help="a seed or a range lo-hi")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--G", type=int, default=4)
    ap.add_argument("--groups", type=int, default=2, help="prompts per step")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--beta", type=float, default=0.04)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--tokens", type=int, default=64, help="most new tokens per completion")
    ap.add_argument("--size", type=int, default=1000, help="training items")
    ap.add_argument("--eval_n", type=int, default=48, help="held-out items")
    ap.add_argument("--eval_batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: the LM program's adaptive share)")
    ap.add_argument("--over", type=json.loads, default={}, help="JSON options put under every variant")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/lm_family_ablation"))
    ap.add_argument("--out", type=Path, default=RECORD)
    ap.add_argument("--summarise", action="store_true", help="recompute the summary of --out, run nothing")
    a = ap.parse_args()
    a.task, a.gsm8k_dir, a.gsm8k_tokens = a.tasks, None, a.tokens  # task_setup's names
    result = json.loads(a.out.read_text()) if a.out.exists() else {"runs": []}
    if not a.summarise:
        setup = task_setup(a.task, a)
        metas = result.get("meta", [])  # one per command that added runs
        result["meta"] = [*([metas] if isinstance(metas, dict) else metas), record.meta()]
        result["settings"] = {k: str(v) for k, v in vars(a).items() if k not in ("summarise", "out", "scratch")}
        if "base_accuracy" not in result:
            result["base_accuracy"] = base_accuracy(a, setup)
        for seed in seed_list(a.seeds):
            for variant in a.variants:
                if any(r["variant"] == variant and r["seed"] == seed for r in result["runs"]):
                    continue
                result["runs"].append(train_and_evaluate(a, variant, seed, setup))
                print(json.dumps({k: v for k, v in result["runs"][-1].items() if k != "rewards"}), flush=True)
                result["summary"] = summarise(result)
                record.prepare(a.out).write_text(json.dumps(result, indent=2))
    result["summary"] = summarise(result)
    record.prepare(a.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
