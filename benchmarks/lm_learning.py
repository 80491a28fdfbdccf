"""Does the reasoning-gym recipe make SmolLM2-135M better at a task? Held-out gains over seeds, by arm.

    python benchmarks/lm_learning.py --task leg_counting --task_options '{"max_animals": 2}' \
        --seeds 0-2 --minutes 30 --arm defaults
    python benchmarks/lm_learning.py --task spell_backward --seeds 0-2 --minutes 10 \
        --arm lr1e-5 --over '{"learning_rate": 1e-5}'
    python benchmarks/lm_learning.py --task gsm8k --data_dir ../shared/data/gsm8k --seeds 0-2 --minutes 15
    python benchmarks/lm_learning.py --task knights_knaves --seeds 0-2 --minutes 15 --program agent --arm agent

Each run is ``recipes/reasoning_gym.py`` in a process of its own, trained for ``--minutes`` (its
``--max_minutes``; ``--max_steps`` only bounds it), then scored on ``--eval_size`` held-out items
from generator seed ``--task_seed + 1,000,003`` that no training item shares: the base model before
training and the trained one after, on the same items (``eval_heldout/eval.json``,
grpo_seq/jobs/heldout.py). ``--over`` gives the arm's options as JSON (any recipe option).
``--task gsm8k`` runs ``recipes/gsm8k_tiny.py`` instead: trained on ``--data_dir``'s train.jsonl,
scored on the first ``--eval_size`` problems of its dev.jsonl (held out: GSM8K's own split).
``--program agent`` gives the task's items to an agent program instead
(examples/agent/reasoning_gym_agent.py through ``recipes/agent.py``: the same prompts, the same
held-out items, the reward its rollout returns), so the agent door's learning is measured as the
recipe's is.

Besides the metric (the recipe's first reward function: correctness), each row compares the base
and trained models on every reward function the recipe scores (``per_reward``: GSM8K's format as
well as its correctness), so what moves and what does not is shown with its interval.

Rows are appended to benchmarks/results/lm_learning/result.json, one per (task, options, arm,
seed): base and trained scores with 95% intervals, the paired difference with its interval and
McNemar p-value, the best constant answer and the trained model's paired difference against it,
steps taken and seconds. A row already there for the same key is replaced. The report and the
experiments page are generated from the record (``python benchmarks/report.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)

# --program agent: the agent of examples/agent/ on the task's items, with the reasoning-gym
# recipe's sampling and answer length (the agent recipe's own defaults suit its calculator).
AGENT = "examples.agent.reasoning_gym_agent:rollout"
AGENT_AS_RECIPE = ["--temperature", "0.7", "--max_completion_length", "64", "--max_total_tokens", "1024"]


def seeds(text: str) -> list[int]:
    """``3`` or ``0-2`` or ``0,4,7``."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def recipe(a: argparse.Namespace) -> list[str]:
    """The recipe and its task options: reasoning-gym's task, or GSM8K's files; or the task's items
    given to an agent program (``--program agent``)."""
    if a.program == "agent":
        config = json.dumps({**json.loads(a.task_options), "seed": a.task_seed, "size": a.task_size})
        return [str(ROOT / "recipes" / "agent.py"), "--rollout", AGENT, "--dataset", f"reasoning_gym:{a.task}",
                "--dataset_config", config, "--eval_dataset", f"reasoning_gym:{a.task}", "--eval_dataset_split", "test",
                "--eval_dataset_config", config, *AGENT_AS_RECIPE]
    if a.task == "gsm8k":
        if a.data_dir is None:
            raise SystemExit("error: --task gsm8k needs --data_dir (a folder with train.jsonl and dev.jsonl)")
        return [str(ROOT / "recipes" / "gsm8k_tiny.py"), "--dataset", str(a.data_dir / "train.jsonl"),
                "--eval_dataset", str(a.data_dir / "dev.jsonl")]
    return [str(ROOT / "recipes" / "reasoning_gym.py"), "--task", a.task, "--task_options", a.task_options,
            "--task_seed", str(a.task_seed), "--task_size", str(a.task_size)]


def per_reward(folder: Path) -> dict:
    """Base against trained on each reward function the run scored, per held-out item (an agent's
    one reward is the record's metric already)."""
    from grpo_seq.scoring.heldout import compare

    if not (folder / "eval_heldout" / "base.jsonl").exists():
        return {}

    base, trained = ([json.loads(x) for x in (folder / "eval_heldout" / f"{m}.jsonl").read_text().splitlines() if x.strip()]
                     for m in ("base", "trained"))
    names = sorted({name for r in base for name in r.get("rewards", {})})
    scores = lambda rows, name: [float(r["rewards"].get(name) or 0.0) for r in rows]  # noqa: E731
    return {name: compare(scores(base, name), scores(trained, name), None) for name in names}


def run_one(a: argparse.Namespace, seed: int, folder: Path) -> dict:
    """One recipe run; its held-out figures, steps and seconds."""
    cmd = [sys.executable, *recipe(a), "--seed", str(seed),
           "--max_steps", str(a.max_steps), "--max_minutes", str(a.minutes), "--eval_size", str(a.eval_size),
           "--torch_threads", str(a.threads), "--log_completions_every", "0", "--save_steps", "0",
           "--output_dir", str(folder), "--overwrite"]
    for name, value in json.loads(a.over).items():
        cmd += [f"--{name}", *(map(str, value) if isinstance(value, list) else [json.dumps(value) if isinstance(value, (dict, bool)) else str(value)])]
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True,
                         cwd=ROOT if a.program == "agent" else None)  # the agent: examples.agent.*
    if res.returncode != 0:
        raise SystemExit(f"run failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-3000:]}")
    held = json.loads((folder / "eval_heldout" / "eval.json").read_text())
    summary = json.loads((folder / "summary.json").read_text())
    print(res.stdout.strip().splitlines()[-1], flush=True)
    return {"seconds": round(time.perf_counter() - start, 1), "train_seconds": round(summary["seconds"], 1),
            "steps": summary["steps"], "heldout": held, "per_reward": per_reward(folder)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True, help="a reasoning-gym task, or gsm8k (with --data_dir)")
    ap.add_argument("--program", choices=["recipe", "agent"], default="recipe",
                    help="recipe: recipes/reasoning_gym.py; agent: the task's items given to "
                    "examples/agent/reasoning_gym_agent.py through recipes/agent.py (the same held-out items)")
    ap.add_argument("--data_dir", type=Path, default=None, help="--task gsm8k: the folder of train.jsonl and dev.jsonl")
    ap.add_argument("--task_options", default="{}")
    ap.add_argument("--task_seed", type=int, default=0, help="generator seed of the training items")
    ap.add_argument("--task_size", type=int, default=1000)
    ap.add_argument("--seeds", type=seeds, default=seeds("0-2"), help="training seeds: 0-2, or 0,3")
    ap.add_argument("--minutes", type=float, default=30.0, help="training budget of each run (--max_minutes)")
    ap.add_argument("--max_steps", type=int, default=100_000, help="a bound above what the minutes allow")
    ap.add_argument("--eval_size", type=int, default=64)
    ap.add_argument("--arm", default="defaults", help="the arm's name in the record")
    ap.add_argument("--over", default="{}", help="the arm's recipe options, a JSON object")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders under this folder")
    ap.add_argument("--out", type=Path, default=record.default_out("lm_learning"))
    ap.add_argument("--note", default=None, help="how the runs were made (a busy machine, one thread): the record's note")
    a = ap.parse_args()
    out = record.prepare(a.out)
    data = json.loads(out.read_text()) if out.exists() else {"rows": []}
    for seed in a.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            folder = (a.keep / f"{a.task}__{a.arm}__{seed}") if a.keep else Path(tmp) / "run"
            result = run_one(a, seed, folder)
        row = {"task": a.task, "options": json.loads(a.task_options), "task_seed": a.task_seed, "arm": a.arm,
               "program": a.program,
               "over": json.loads(a.over), "seed": seed, "minutes": a.minutes, **result, "meta": record.meta()}
        key = lambda r: (r["task"], json.dumps(r["options"], sort_keys=True), r["task_seed"], r["arm"], r["seed"])  # noqa: E731
        data["rows"] = [r for r in data["rows"] if key(r) != key(row)] + [row]
        data["meta"] = {**record.meta(), **({"note": a.note} if a.note else {})}
        out.write_text(json.dumps(data, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
