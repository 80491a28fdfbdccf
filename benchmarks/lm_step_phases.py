"""Where a step of the GSM8K recipe's defaults goes, alone and with other work on the machine.

    python benchmarks/lm_step_phases.py                    # alone and busy, fixed and adaptive threads
    python benchmarks/lm_step_phases.py --steps 3 --repeats 2

Runs `recipes/gsm8k_tiny.py` with its defaults (2 prompts x G = 4, up to 256 new tokens, fp32)
for --steps steps, in four conditions, each in its own process, alternating:

- alone / busy: nothing else running, or one other CPU-bound process (a Python busy loop) for
  the whole run, as a laptop's other work would be;
- fixed / adaptive: `--torch_threads <cores>` (every core, whatever else runs: the recipe's
  default before grpo_seq.loop.cpu_share), or `--torch_threads 0` (the default: before each step,
  as many threads as the cores other work left idle).

Reported per condition: the median over steps after the first (which warms up) of the step's
seconds and of its phases from metrics.jsonl (perf/sample_seconds: generation and rewards;
perf/score_seconds: old and reference log-probs; perf/backward_seconds: forward and backward;
perf/optimizer_seconds), the threads used, and the process's peak RSS. Ratios: busy over alone
for each thread policy.
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

from record import ROOT, default_out, meta

PHASES = ["perf/step_seconds", "perf/sample_seconds", "perf/score_seconds", "perf/backward_seconds",
          "perf/optimizer_seconds"]
DATA = ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"


def run_once(policy: str, busy: bool, steps: int, data: Path, work: Path) -> dict:
    """One recipe run; returns its per-step metrics' medians (steps after the first)."""
    threads = "0" if policy == "adaptive" else str(os.cpu_count())
    out = Path(tempfile.mkdtemp(dir=work))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        res = subprocess.run([sys.executable, "recipes/gsm8k_tiny.py", "--dataset", str(data), "--max_steps", str(steps),
                              "--torch_threads", threads, "--save_steps", "0", "--log_completions_every", "0",
                              "--overwrite", "--output_dir", str(out)],
                             cwd=ROOT, capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    if res.returncode != 0:
        raise SystemExit(f"the recipe failed ({policy}, busy={busy}):\n{res.stderr[-3000:]}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if "perf/step_seconds" in x]
    later = rows[1:] or rows
    result = {k: statistics.median(r[k] for r in later) for k in PHASES}
    result["threads"] = [r.get("perf/torch_threads") for r in rows]
    result["peak_rss_gib"] = max(r["perf/peak_rss_gib"] for r in rows)
    result["steps_seconds"] = [r["perf/step_seconds"] for r in rows]
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="Steps per run (the first is not counted).")
    ap.add_argument("--repeats", type=int, default=1, help="Runs per condition, alternating.")
    ap.add_argument("--data", type=Path, default=DATA, help="GSM8K train.jsonl.")
    ap.add_argument("--out", type=Path, default=ROOT / default_out("lm_step_phases"))
    a = ap.parse_args()
    conditions = [(p, b) for b in (False, True) for p in ("fixed", "adaptive")]
    runs: dict[str, list[dict]] = {f"{p}/{'busy' if b else 'alone'}": [] for p, b in conditions}
    with tempfile.TemporaryDirectory() as work:
        for r in range(a.repeats):
            for p, b in (conditions if r % 2 == 0 else conditions[::-1]):
                res = run_once(p, b, a.steps, a.data, Path(work))
                runs[f"{p}/{'busy' if b else 'alone'}"].append(res)
                print(p, "busy" if b else "alone", json.dumps({k: round(v, 2) for k, v in res.items()
                                                              if isinstance(v, float)}), res["threads"], flush=True)
    rows = []
    for name, rs in runs.items():
        row = {"condition": name, **{k: statistics.median(x[k] for x in rs) for k in PHASES},
               "peak_rss_gib": statistics.median(x["peak_rss_gib"] for x in rs), "threads": rs[0]["threads"], "runs": rs}
        rows.append(row)
    by = {r["condition"]: r for r in rows}
    ratios = {p: by[f"{p}/busy"]["perf/step_seconds"] / by[f"{p}/alone"]["perf/step_seconds"] for p in ("fixed", "adaptive")}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"meta": meta(), "steps": a.steps, "repeats": a.repeats, "rows": rows,
                                 "busy_over_alone": ratios}, indent=2))
    print(json.dumps(ratios), f"-> {a.out}")


if __name__ == "__main__":
    main()
