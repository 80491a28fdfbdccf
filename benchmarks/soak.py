"""Soak: train for a long time and watch the resident memory, which must stop growing after warm-up.

    python benchmarks/soak.py --out benchmarks/results/soak/result.json         # CartPole 20 min, then the LM 10 min
    python benchmarks/soak.py --runs cartpole --minutes 1 --interval 1    # a quick look

Each run is a recipe in its own process with an endless budget; every `--interval` seconds this
script reads the process's resident set size (VmRSS in /proc, so Linux only). The run's time
counts from its first training row (metrics.jsonl), however long it took to start. After the
run's time it sends SIGTERM, which also checks that the recipe then checkpoints and exits
(status 143). Reported per run: RSS at the end of warm-up (the first `--warmup` fraction of
the time), the largest and last RSS after it, and the growth after warm-up as a least-squares
slope (MiB per minute, and projected over the run) and as the median of the last quarter of
samples minus the median of the first quarter after warm-up. `--out` writes every sample;
a PNG of the curves is written beside it when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT.parent / "shared/data/gsm8k/train.jsonl"


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def commands(a: argparse.Namespace, out: Path) -> dict[str, list[str]]:
    py = [sys.executable]
    lm = [*py, str(ROOT / "recipes/gsm8k_tiny.py"), "--dataset", str(a.data), "--max_steps", "1000000",
          "--max_completion_length", str(a.max_completion_length), "--save_steps", "5", "--output_dir", str(out / "lm")]
    if a.model:
        lm += ["--model", a.model]
    return {
        "cartpole": [*py, str(ROOT / "recipes/cartpole.py"), "--total_env_steps", "1000000000000",
                     "--save_steps", "500", "--output_dir", str(out / "cartpole")],
        "lm": lm,
    }


def soak(name: str, cmd: list[str], seconds: float, interval: float, warmup: float, log: Path) -> dict:
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": str(ROOT)}
    # Output to a file, never an unread pipe: a full pipe would block the run's progress bar.
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True)
    metrics = Path(cmd[cmd.index("--output_dir") + 1]) / "metrics.jsonl"
    # the clock starts at the first training row, however long the start took on a busy machine:
    # the soak measures a run that trains, and a SIGTERM then meets the run's own handler
    while proc.poll() is None and not _trained(metrics):
        time.sleep(interval)
    t0 = time.monotonic()
    samples: list[tuple[float, float]] = []
    while (t := time.monotonic() - t0) < seconds and proc.poll() is None:
        r = rss_mib(proc.pid)
        if r is not None:
            samples.append((t, r))
        time.sleep(interval)
    if proc.poll() is not None:
        raise RuntimeError(f"{name} ended early (status {proc.returncode}):\n{log.read_text()[-3000:]}")
    proc.send_signal(signal.SIGTERM)
    try:
        status = proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        status = proc.wait()
    steps = sum(1 for ln in metrics.open() if "reward/mean" in ln)
    return {"name": name, "command": cmd, "seconds": seconds, "exit_status_after_sigterm": status,
            "training_steps": steps, "samples": samples, **figures(samples, seconds * warmup)}


def _trained(metrics: Path) -> bool:
    """Whether the run has written a training row yet."""
    try:
        return "reward/mean" in metrics.read_text()
    except FileNotFoundError:
        return False


def figures(samples: list[tuple[float, float]], warm_until: float) -> dict:
    after = [(t, r) for t, r in samples if t >= warm_until]
    if len(after) < 4:
        return {"warm_samples": len(after)}
    ts, rs = [t for t, _ in after], [r for _, r in after]
    mt, mr = statistics.fmean(ts), statistics.fmean(rs)
    slope = sum((t - mt) * (r - mr) for t, r in after) / sum((t - mt) ** 2 for t in ts)  # MiB per second
    q = max(1, len(rs) // 4)
    span_min = (ts[-1] - ts[0]) / 60
    return {
        "warm_samples": len(after),
        "rss_mib_end_of_warmup": rs[0],
        "rss_mib_max_after_warmup": max(rs),
        "rss_mib_last": rs[-1],
        "rss_mib_peak": max(r for _, r in samples),
        "slope_mib_per_minute": slope * 60,
        "projected_growth_mib_over_run": slope * 60 * span_min,
        "growth_mib_last_quarter_vs_first_quarter": statistics.median(rs[-q:]) - statistics.median(rs[:q]),
    }


def plot(results: list[dict], png: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, res in zip(axes[0], results):
        ts, rs = zip(*res["samples"]) if res["samples"] else ((), ())
        ax.plot([t / 60 for t in ts], rs)
        ax.axvline(res["seconds"] * res["warmup"] / 60, color="grey", ls="--", label="end of warm-up")
        ax.set(title=f"{res['name']}: resident memory", xlabel="minutes", ylabel="RSS (MiB)")
        ax.set_ylim(bottom=0)
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="+", default=["cartpole", "lm"], choices=["cartpole", "lm"])
    ap.add_argument("--minutes", type=float, nargs="+", default=None,
                    help="Minutes per run, one value or one per run (default: CartPole 20, LM 10).")
    ap.add_argument("--interval", type=float, default=5.0, help="Seconds between RSS samples.")
    ap.add_argument("--warmup", type=float, default=0.2, help="Fraction of each run that counts as warm-up.")
    ap.add_argument("--model", default=None, help="LM run: a model folder (default: the recipe's, SmolLM2-135M).")
    ap.add_argument("--data", type=Path, default=GSM8K, help="LM run: prompts (question/answer JSONL).")
    ap.add_argument("--max_completion_length", type=int, default=128)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/grpo_seq_soak"))
    ap.add_argument("--out", type=Path, default=record.default_out("soak"))
    a = ap.parse_args()
    default_minutes = {"cartpole": 20.0, "lm": 10.0}
    minutes = a.minutes or [default_minutes[r] for r in a.runs]
    if len(minutes) == 1:
        minutes = minutes * len(a.runs)
    cmds = commands(a, a.workdir)
    results = []
    for name, m in zip(a.runs, minutes):
        shutil.rmtree(a.workdir / name, ignore_errors=True)  # a fresh run folder each time
        res = soak(name, cmds[name], m * 60, a.interval, a.warmup, a.workdir / f"{name}.log")
        res["warmup"] = a.warmup
        results.append(res)
        print(json.dumps({k: v for k, v in res.items() if k not in ("samples", "command")}), flush=True)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({
            "meta": record.meta(),
            "command": " ".join(["python", "benchmarks/soak.py", *sys.argv[1:]]), "date": date.today().isoformat(),
            "interval_seconds": a.interval, "warmup_fraction": a.warmup, "runs": results,
        }, indent=1))
        plot(results, a.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
