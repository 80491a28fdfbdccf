"""Learning per CPU minute, over seeds: held-out accuracy after the same training wall time, grpo-seq against TRL.

    python benchmarks/lm_learning_per_minute.py --seeds 0-2                     # the three tasks, 10 minutes a run
    python benchmarks/lm_learning_per_minute.py --tasks knights_knaves --seeds 0 --minutes 1 --eval_n 8 \
        --out /tmp/lmpm/result.json                                             # a quick look

For each task and training seed, two worker processes start together and train side by side for
the same wall budget: grpo-seq's LM job built as recipes/reasoning_gym.py builds it (its
``ReasoningGymConfig`` and its ``task`` reward) and TRL's GRPOTrainer, from the same model, on the
same prompts in the same order, with the same reward function, one torch thread each. Running
them at once means whatever else the machine does slows both alike.

Settings: the recipe's defaults, read from ``ReasoningGymConfig`` (recipes/reasoning_gym.py and
the LMJob fields under it), never restated here: G, prompts per step, learning rate, beta,
temperature, most new tokens, shots, training items (``task_size`` of them from generator seed
``task_seed``) and the held-out set: the first ``eval_size`` items of generator seed ``task_seed +
1,000,003`` that share no question with a training item, answered greedily and scored exactly as
the recipe's eval_heldout does (the ``HeldOutSet`` of grpo_seq.jobs.lm.heldout_callbacks; the
task's scorer, full marks only). The training seed (``--seeds``) seeds both systems and the
recipe's prompt order (grpo-seq shuffles the prompts by seed); TRL gets its dataset in that same
order, its own shuffling off. TRL is pinned to grpo-seq's objective as benchmarks/lm_vs_trl.py
does (``trl_config``); grpo-seq keeps its own defaults where TRL has none (a batch whose groups
all tie takes no optimizer step). Each worker answers the held-out items at 0, between, and at
the end of its budget, its training clock paused while it does. ``gsm8k`` as a task: training on
--gsm8k_dir/train.jsonl, held out: the first items of dev.jsonl, the correctness reward.

The record (benchmarks/results/lm_learning_per_minute/result.json) holds one row per (task,
seed): each system's points (minutes, steps, accuracy and the per-item scores); and per task,
pooled over seeds (``tasks``): the base model's score, each system's final score averaged over
seeds with its 95% interval over the items (grpo_seq.math.stats.mean_interval of each item's
score averaged over seeds), and the paired difference grpo-seq minus TRL (items paired within each
seed, averaged over seeds per item; the normal interval over the items, the report's
``items_interval``, as lm_learning's gains have; beside it Newcombe's interval and McNemar's test
over all (item, seed) pairs, which count an item's seeds as independent). A row already in --out for the same
(task, seed) is replaced and the others kept, so a crashed run resumes with only the missing
pairs. Plot: result.png beside it. ``python benchmarks/report.py`` makes the docs table.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # benchmarks/lm_family_ablation.py's (this benchmark's: the recipe's)
# the reasoning-gym tasks where the recipe's defaults learned (benchmarks/results/lm_learning), with those options
TASKS = ['number_format:{"max_num_candidates": 2}', "knights_knaves", 'rotate_matrix:{"max_n": 2, "max_rotations": 0}']
SYSTEMS = ("grpo-seq", "trl")
RECIPE = ROOT / "recipes" / "reasoning_gym.py"


def parse_task(text: str) -> tuple[str, dict]:
    """``task`` or ``task:{JSON options}``."""
    task, _, options = text.partition(":")
    return task, json.loads(options) if options else {}


def task_setup(text: str, a: argparse.Namespace) -> tuple[dict, list, list, int, str]:
    """(LMJob fields, reward functions, held-out rows, eval tokens, accuracy metric) of one task: the
    setup of benchmarks/lm_family_ablation.py, whose record was made with these items (this
    benchmark's own is :func:`job_setup`, the recipe's)."""
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


# -- the recipe's run ---------------------------------------------------------------------------


def recipe():
    """recipes/reasoning_gym.py as a module, loaded under another name (imported as
    ``reasoning_gym`` it hands that name to the reasoning-gym package)."""
    name = "reasoning_gym_recipe"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, RECIPE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before it runs: its dataclass looks its module up
        spec.loader.exec_module(module)
    return sys.modules[name]


def recipe_defaults() -> dict:
    """This benchmark's settings as the recipe's config defaults them (their one home)."""
    cfg = recipe().ReasoningGymConfig()
    return {"model": cfg.model, "G": cfg.num_generations, "groups": cfg.num_groups, "lr": cfg.learning_rate,
            "beta": cfg.beta, "temperature": cfg.temperature, "tokens": cfg.max_completion_length, "shots": cfg.shots,
            "size": cfg.task_size, "task_seed": cfg.task_seed, "eval_n": cfg.eval_size}


def job_setup(text: str, a: argparse.Namespace) -> tuple:
    """(the run's spec, its reward functions, the held-out set) of one task and seed, as
    recipes/reasoning_gym.py builds them (gsm8k: an LMJob on the files, the same way)."""
    from dataclasses import replace

    from grpo_seq.jobs.lm import heldout_callbacks, load_heldout_rows
    from grpo_seq.jobs.lm_spec import LMJob
    from grpo_seq.scoring.rewards import RewardScorer

    task, options = parse_task(text)
    common = dict(model=a.model, seed=a.seed, num_generations=a.G, num_groups=a.groups, learning_rate=a.lr,
                  beta=a.beta, temperature=a.temperature, eval_size=a.eval_n, output_dir=str(a.worker_out),
                  overwrite=True, max_steps=100_000, torch_threads=1, use_cpu=True, log_completions_every=0,
                  save_steps=0)
    if task == "gsm8k":
        from reward_fns import GSM8K_INSTRUCTION, GSM8K_SYSTEM_PROMPT, correctness_reward, format_reward

        cfg = LMJob(dataset=str(a.gsm8k_dir / "train.jsonl"), eval_dataset=str(a.gsm8k_dir / "dev.jsonl"),
                    system_prompt=GSM8K_SYSTEM_PROMPT, instruction=GSM8K_INSTRUCTION, answer_column="answer",
                    reward_fns=["correctness", "format"], max_completion_length=a.gsm8k_tokens, **common)
        fns = [correctness_reward, format_reward]
    else:
        rec = recipe()
        cfg = rec.ReasoningGymConfig(task=task, task_options=json.dumps(options), task_seed=a.task_seed,
                                     task_size=a.size, shots=a.shots, max_completion_length=a.tokens, **common)
        fns = rec.build_reward_fns(cfg)
    scorer = RewardScorer(fns)
    (heldout,) = heldout_callbacks(cfg, load_heldout_rows(cfg, scorer), scorer)
    held = heldout.set
    held.batch_size = a.eval_batch
    return replace(cfg, eval_size=0), fns, held  # the run itself scores nothing: the clock below does


def prompt_order(cfg, n: int) -> list[int]:
    """The order grpo-seq's sampler visits the ``n`` prompts in (LMGroupSampler's own code, seeded
    by the training seed), two passes of it: TRL's dataset, visited in order."""
    from types import SimpleNamespace

    from grpo_seq.sampling.lm import LMGroupSampler

    state = SimpleNamespace(num_groups=cfg.num_groups, num_processes=1, process_index=0, shuffle=cfg.shuffle_prompts,
                            seed=cfg.seed, epoch=0, _order=[], dataset=range(n))
    order: list[int] = []
    while len(order) < 2 * n:
        order += LMGroupSampler._next_indices(state)
    return order


class Clock:
    """Training seconds with evaluations left out; evaluates at each mark it passes."""

    def __init__(self, a: argparse.Namespace, held):
        self.budget = a.minutes * 60.0
        self.marks = [self.budget * i / a.evals for i in range(a.evals + 1)]
        self.held = held
        self.trained, self.resumed, self.steps, self.points = 0.0, None, 0, []
        self.out = a.worker_out and Path(str(a.worker_out) + "_evals")

    def evaluate(self, model, tokenizer) -> None:
        import torch

        start = time.perf_counter()
        records = self.held.answer(model, tokenizer)
        scores = [r["score"] for r in records]
        point = {"minutes": round(self.trained / 60, 3), "steps": self.steps, "accuracy": sum(scores) / len(scores),
                 "eval_seconds": round(time.perf_counter() - start, 1), "threads": torch.get_num_threads()}
        print(json.dumps({"point": point}), flush=True)
        self.points.append({**point, "scores": scores})
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

    cfg, fns, held = job_setup(a.task, a)
    clock = Clock(a, held)

    class Budget(JobCallbacks):
        def on_start(self, run) -> None:
            clock.start(run.trainer.policy.model, run.trainer.policy.tokenizer)

        def on_step(self, run, metrics) -> bool:
            return clock.step(run.trainer.policy.model, run.trainer.policy.tokenizer)

    run_lm_job(cfg, [Budget()], reward_funcs=fns, label="learning_per_minute")
    return {"points": clock.points, "steps": clock.steps}


def trl_config(a: argparse.Namespace, cfg):
    """TRL's GRPOConfig pinned to grpo-seq's objective and the run's settings (precision included:
    TRL's own default, bf16 autocast, would also wrap the model's forward, evaluation too)."""
    from trl import GRPOConfig

    G = cfg.num_generations
    return GRPOConfig(
        output_dir=str(a.worker_out), max_steps=100_000, seed=cfg.seed, per_device_train_batch_size=cfg.num_groups * G,
        gradient_accumulation_steps=1, num_generations=G, max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature, top_p=1.0, top_k=0, learning_rate=cfg.learning_rate, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, beta=cfg.beta, loss_type="grpo", scale_rewards="group",
        num_iterations=1, epsilon=0.2, use_bias_correction_kl=False, use_cpu=True, disable_dropout=True, gradient_checkpointing=False,
        bf16=cfg.bf16, fp16=False,  # TRL's default is bf16 autocast, even on a CPU: the recipe's precision instead (fp32)
        shuffle_dataset=False, logging_steps=1, report_to="none", save_strategy="no", log_completions=False,
        dataloader_num_workers=0)


def with_row_columns(fn, rows):
    """``fn`` given each completion's row columns (all but the prompt) from ``rows`` by the ``row``
    column TRL passes, under ``fn``'s own name."""

    def reward(prompts, completions, row, **kw):
        columns = {k: [rows[i].get(k) for i in row] for k in rows[0] if k != "prompt"}
        return fn(prompts, completions, **{**kw, **columns})

    reward.__name__ = fn.__name__
    return reward


def worker_trl(a: argparse.Namespace) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from grpo_seq.io.models import load_model_and_tokenizer
    from grpo_seq.jobs.lm import load_prompts

    cfg, fns, held = job_setup(a.task, a)
    clock = Clock(a, held)
    rows = load_prompts(cfg)
    # each row's prompt and its place; the rewards read the row's other columns (reasoning-gym's
    # metadata) from the rows themselves, as grpo-seq's do: Arrow would reshape them or refuse them
    dataset = Dataset.from_list([{"prompt": rows[i]["prompt"], "row": i} for i in prompt_order(cfg, len(rows))])
    model, tokenizer = load_model_and_tokenizer(cfg.model, cfg.dtype)  # the same weights as ours
    eval_tokenizer = copy.deepcopy(tokenizer)  # TRL may edit its own (chat template, padding): evaluate as ours does

    class Budget(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kw):
            clock.start(model, eval_tokenizer)

        def on_step_end(self, args, state, control, model=None, **kw):
            control.should_training_stop = clock.step(model, eval_tokenizer)

    GRPOTrainer(model=model, reward_funcs=[with_row_columns(fn, rows) for fn in fns], args=trl_config(a, cfg),
                train_dataset=dataset,
                processing_class=tokenizer, callbacks=[Budget()]).train()
    return {"points": clock.points, "steps": clock.steps}


def run_worker(a: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    result = (worker_ours if a.worker == "grpo-seq" else worker_trl)(a)
    result["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print("RESULT " + json.dumps(result), flush=True)


# -- the side-by-side runs and the record ---------------------------------------------------------


def run_pair(text: str, seed: int, a: argparse.Namespace, scratch: Path) -> dict:
    """Both workers at once on one task and seed; their results by system."""
    procs = {}
    for system in SYSTEMS:
        cmd = [sys.executable, __file__, "--worker", system, "--task", text, "--seed", str(seed),
               "--worker_out", str(scratch / system), *(f"--{k}={v}" for k, v in shared_settings(a).items())]
        log = open(scratch / f"{system}.log", "w")
        procs[system] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          env={**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1",
                                               "HF_HUB_OFFLINE": "1"}), log)
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
             "tokens", "gsm8k_tokens", "size", "shots", "task_seed", "gsm8k_dir")
    return {n: getattr(a, n) for n in names}


def ok(row: dict) -> bool:
    return all(row[s].get("points") for s in SYSTEMS)


def summarise(rows: list[dict]) -> list[dict]:
    """Per task (and settings), pooled over its seeds: the base model's score, each system's final
    score and the paired difference grpo-seq minus TRL, each with its 95% interval."""
    from report import items_interval  # the interval over items of lm_learning's gains (benchmarks/report.py)

    from grpo_seq.math.stats import mean_interval, paired_difference

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if ok(r):
            groups.setdefault((r["task"], json.dumps(r["settings"], sort_keys=True)), []).append(r)
    out = []
    for (task, _), runs in groups.items():
        runs = sorted(runs, key=lambda r: r["seed"])
        final = {s: [r[s]["points"][-1]["scores"] for r in runs] for s in SYSTEMS}
        starts = [r[s]["points"][0]["scores"] for r in runs for s in SYSTEMS]
        base = starts[0]
        n = len(base)
        per_item = {s: [statistics.mean(col) for col in zip(*final[s])] for s in SYSTEMS}
        entry: dict = {"task": task, "settings": runs[0]["settings"], "minutes": float(runs[0]["settings"]["minutes"]),
                       "seeds": [r["seed"] for r in runs], "n": n,
                       "base": {"score": statistics.mean(base), "interval": list(mean_interval(base)),
                                "same_for_every_run": all(s == base for s in starts)}}
        for s in SYSTEMS:
            # each item's score averaged over the seeds: Wilson's interval where those are all 0 or 1, else the normal one
            lo, hi = mean_interval(per_item[s])
            flat = [x for scores in final[s] for x in scores]
            entry[s] = {"final": statistics.mean(per_item[s]), "interval": [max(lo, 0.0), min(hi, 1.0)],
                        "steps": [r[s]["steps"] for r in runs],
                        "start_per_seed": [r[s]["points"][0]["accuracy"] for r in runs],
                        "final_per_seed": [r[s]["points"][-1]["accuracy"] for r in runs],
                        "minutes_per_seed": [r[s]["points"][-1]["minutes"] for r in runs],
                        "pooled_pairs_interval": list(mean_interval(flat))}
        m, lo, hi = items_interval([o - t for o, t in zip(per_item["grpo-seq"], per_item["trl"])], per_item["trl"])
        pooled = paired_difference([x for sc in final["trl"] for x in sc], [x for sc in final["grpo-seq"] for x in sc])
        entry["difference"] = {
            "value": m, "interval": [lo, hi], "holds_0": lo <= 0 <= hi,
            "method": "grpo-seq minus TRL per item, averaged over seeds; 95% normal interval over the items "
                      "(report.items_interval)",
            "per_seed": [a - b for a, b in zip(entry["grpo-seq"]["final_per_seed"], entry["trl"]["final_per_seed"])],
            "pooled_pairs": {**pooled, "n": len(final["trl"]) * n,
                             "note": "every (item, seed) pair as one observation: it counts an item's seeds as independent"}}
        out.append(entry)
    return out


def load_record(out: Path) -> dict:
    """--out's record when it has this benchmark's rows (one per task and seed), else a new one."""
    if out.exists():
        data = json.loads(out.read_text())
        if data.get("rows") and all("seed" in r for r in data["rows"]):
            return data
    return {"rows": []}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in result["rows"] if ok(r)))
    if not tasks:
        return
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for row in (r for r in result["rows"] if r["task"] == task and ok(r)):
            for system, colour in zip(SYSTEMS, ("tab:blue", "tab:orange")):
                pts = row[system]["points"]
                ax.plot([p["minutes"] for p in pts], [p["accuracy"] for p in pts], "o-", color=colour, alpha=0.7,
                        label=system if row["seed"] == min(r["seed"] for r in result["rows"] if r["task"] == task) else None)
        ax.set_title(task.split(":")[0] + (" (easier options)" if ":" in task else ""))
        ax.set_xlabel("training minutes (1 thread each, side by side)")
        ax.set_ylabel("held-out accuracy (one line a seed)")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    from lm_learning import seeds as seed_list  # 0-2, or 0,3

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=TASKS, help="reasoning-gym task[:JSON options], or gsm8k")
    ap.add_argument("--seeds", type=seed_list, default=seed_list("0-2"), help="training seeds: 0-2, or 0,3")
    ap.add_argument("--model", help="default: the recipe's")
    ap.add_argument("--minutes", type=float, default=10.0, help="training wall budget of each system per task and seed")
    ap.add_argument("--evals", type=int, default=2, help="evaluations after the one at 0, evenly over the budget")
    ap.add_argument("--eval_n", type=int, help="held-out items (default: the recipe's eval_size)")
    ap.add_argument("--eval_batch", type=int, default=16)
    ap.add_argument("--G", type=int, help="completions per prompt (default: the recipe's)")
    ap.add_argument("--groups", type=int, help="prompts per step (default: the recipe's)")
    ap.add_argument("--lr", type=float, help="default: the recipe's")
    ap.add_argument("--beta", type=float, help="default: the recipe's")
    ap.add_argument("--temperature", type=float, help="default: the recipe's")
    ap.add_argument("--tokens", type=int, help="most new tokens per completion, reasoning-gym (default: the recipe's)")
    ap.add_argument("--gsm8k_tokens", type=int, default=256)
    ap.add_argument("--size", type=int, help="reasoning-gym training items (default: the recipe's task_size)")
    ap.add_argument("--shots", type=int, help="worked examples before each question (default: the recipe's)")
    ap.add_argument("--task_seed", type=int, help="generator seed of the training items; held out: this + 1,000,003 "
                    "(default: the recipe's)")
    ap.add_argument("--gsm8k_dir", type=Path, default=ROOT.parent / "shared" / "data" / "gsm8k")
    ap.add_argument("--note", default=None, help="how the runs were made (a busy machine): the record's note")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/lm_learning_per_minute"))
    ap.add_argument("--out", type=Path, default=record.default_out("lm_learning_per_minute"))
    ap.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--worker_out", type=Path, help=argparse.SUPPRESS)
    ap.set_defaults(**recipe_defaults())
    a = ap.parse_args()
    if a.worker:
        return run_worker(a)
    out = record.prepare(a.out)
    result = load_record(out)
    settings = {k: str(v) for k, v in shared_settings(a).items()}
    for text in a.tasks:
        for seed in a.seeds:
            scratch = a.scratch / f"{parse_task(text)[0]}__{seed}"
            scratch.mkdir(parents=True, exist_ok=True)
            row = {"task": text, "seed": seed, "settings": settings, "load_before": os.getloadavg()[0],
                   **run_pair(text, seed, a, scratch), "meta": record.meta()}
            print(json.dumps({k: (v if k not in SYSTEMS else {"steps": v.get("steps"), "error": v.get("error"),
                                                              "accuracy": [p["accuracy"] for p in v.get("points", [])]})
                              for k, v in row.items() if k != "meta"})[:3000], flush=True)
            result["rows"] = [r for r in result["rows"] if (r["task"], r["seed"]) != (text, seed)] + [row]
            commands = list(dict.fromkeys(r["meta"]["command"] for r in result["rows"]))
            result["meta"] = {**record.meta(), "command": commands[0] if len(commands) == 1 else commands,
                              **({"note": a.note} if a.note else {})}
            result["settings"] = settings
            result["tasks"] = summarise(result["rows"])
            out.write_text(json.dumps(result, indent=1))
            plot(result, out.with_name("result.png"))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
