"""Greedy completions of a prompt dataset, scored by reward functions: ``grpo-seq eval lm``.

    grpo-seq eval lm --model runs/<run>/model --dataset dev.jsonl --reward_funcs mypkg.rewards:fn
    grpo-seq eval lm --help

The dataset and reward functions are given as to ``grpo-seq train-lm`` (TRL's formats; import
paths, the working folder importable). Writes ``<output_dir>/eval.json`` (the mean total reward,
each function's mean over the rows it scored, ``n``) and ``<output_dir>/completions.jsonl`` (each
prompt, its completion and rewards).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from typing import Sequence

import torch

from .cli import cli_errors, parse_config, require
from .data import check_prompt_lengths, greedy_completions, row_place
from .errors import ConfigError
from .models import load_model_and_tokenizer
from .prompt_data import prompt_rows, read_rows
from .rewards import RewardScorer
from .serialization import atomic_write_text

__all__ = ["EvalLMConfig", "evaluate", "score_greedy", "main"]


@dataclass
class EvalLMConfig:
    model: str | None = field(default=None, metadata={"help": "Hub id, local folder (e.g. a run's model/) or .gguf file."})
    dataset: str | None = field(
        default=None, metadata={"help": "A .jsonl, .json, .parquet or .csv file, a save_to_disk folder, or a hub id."})
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    dataset_split: str = field(default="test", metadata={"help": "Split of a hub dataset or a saved DatasetDict."})
    prompt_column: str | None = field(default=None, metadata={"help": "The prompt's column (default: prompt, else question)."})
    answer_column: str | None = field(default=None, metadata={"help": "A column given to the rewards as 'answer'."})
    system_prompt: str = field(default="", metadata={"help": "System message before each prompt ('' for none)."})
    instruction: str = field(default="", metadata={"help": "Appended to each string prompt ('' for none)."})
    as_chat: bool = field(default=False, metadata={"help": "Send string prompts through the chat template."})
    reward_funcs: list[str] = field(
        default_factory=list, metadata={"help": "Reward functions by import path (mypkg.rewards:my_fn)."})
    reward_weights: list[float] | None = field(default=None, metadata={"help": "One weight per reward function."})
    limit: int = field(default=0, metadata={"help": "Evaluate the first N prompts only (0: all)."})
    max_new_tokens: int = field(default=256, metadata={"help": "Most tokens per completion."})
    batch_size: int = field(default=16, metadata={"help": "Prompts per generate call."})
    dtype: str = field(default="float32", metadata={"help": "float32 or bfloat16."})
    torch_threads: int = field(default=0, metadata={"help": "torch CPU threads (0: torch's default)."})
    trust_remote_code: bool = field(default=False, metadata={"help": "Run model code from the hub (off: safe)."})
    output_dir: str = field(default="runs/eval_lm", metadata={"help": "Where eval.json and completions.jsonl go."})

    def __post_init__(self) -> None:
        for name in ("limit", "torch_threads"):
            require(self, name, getattr(self, name) >= 0, "must be >= 0")
        for name in ("max_new_tokens", "batch_size"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")


def score_greedy(model: Any, tokenizer: Any, rows: Sequence[dict], scorer: RewardScorer, max_new_tokens: int,
                 batch_size: int = 16, progress: bool = False) -> tuple[dict[str, float], list[dict]]:
    """One greedy completion per row, scored: ``({"reward": mean, "rewards/<fn>": mean, "n": rows},
    one record per row)``."""
    prompts = [r["prompt"] for r in rows]
    was_training = model.training
    model.eval()
    texts = greedy_completions(model, tokenizer, prompts, max_new_tokens, batch_size, progress=progress)
    model.train(was_training)
    completions = texts if isinstance(prompts[0], str) else [[{"role": "assistant", "content": t}] for t in texts]
    columns = {k: [r.get(k) for r in rows] for k in rows[0] if k != "prompt"}
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    totals, parts = scorer.score(prompts, completions, columns, ids)

    def mean(values: Sequence[float | None]) -> float:
        scored = [v for v in values if v is not None]
        return sum(scored) / len(scored) if scored else float("nan")

    metrics = {"reward": sum(totals) / len(totals), **{f"rewards/{n}": mean(p) for n, p in zip(scorer.names, parts)},
               "n": len(rows)}
    records = [{"prompt": p if isinstance(p, str) else p[-1]["content"], "completion": t, "reward": r,
                "rewards": {n: part[i] for n, part in zip(scorer.names, parts)}}
               for i, (p, t, r) in enumerate(zip(prompts, texts, totals))]
    return metrics, records


def evaluate(cfg: EvalLMConfig) -> dict:
    """Check every row and reward function, generate, score, write eval.json and completions.jsonl."""
    for name in ("model", "dataset"):
        if getattr(cfg, name) is None:
            raise ConfigError(f"--{name}: required")
    if not cfg.reward_funcs:
        raise ConfigError("--reward_funcs: give at least one reward function (package.module:function)")
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    source = f"--dataset {cfg.dataset}"
    rows = prompt_rows(read_rows(cfg.dataset, cfg.dataset_split, cfg.dataset_config), cfg.prompt_column,
                       cfg.answer_column, cfg.system_prompt, cfg.instruction, cfg.as_chat, source=source)
    rows = rows[: cfg.limit] if cfg.limit else rows
    scorer = RewardScorer(cfg.reward_funcs, cfg.reward_weights)
    scorer.check_dataset(rows, source)  # a bad row found after generating would waste the evaluation
    model, tokenizer = load_model_and_tokenizer(cfg.model, cfg.dtype, cfg.trust_remote_code)
    check_prompt_lengths(tokenizer, [r["prompt"] for r in rows], cfg.max_new_tokens,
                         getattr(model.config, "max_position_embeddings", None), lambda i: row_place(rows, i, source))
    t0 = time.perf_counter()
    metrics, records = score_greedy(model, tokenizer, rows, scorer, cfg.max_new_tokens, cfg.batch_size, progress=True)
    result = {**metrics, "model": cfg.model, "dataset": cfg.dataset, "max_new_tokens": cfg.max_new_tokens,
              "seconds": round(time.perf_counter() - t0, 1)}
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "completions.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    atomic_write_text(out / "eval.json", json.dumps(result, indent=2))
    print(json.dumps(result))
    return result


def main(argv: list[str] | None = None) -> dict:
    """``grpo-seq eval lm``: bad usage ends as one ``error: ...`` line (exit 2)."""
    with cli_errors():
        return evaluate(parse_config(EvalLMConfig, argv))


if __name__ == "__main__":
    main()
