"""Greedy accuracy and format rate of a chat model on GSM8K problems.

    python recipes/eval_gsm8k.py --dataset ../shared/data/gsm8k/dev.jsonl --limit 100 --output_dir runs/eval_base
    python recipes/eval_gsm8k.py --model runs/<run>/model --dataset ../shared/data/gsm8k/dev.jsonl --output_dir runs/eval_after

Writes ``<output_dir>/eval.json`` (``accuracy``; ``n``; ``format_rate``: share of answers with a
``#### <number>`` line; ``clean_format_rate``: share that end with it alone, format reward 1) and
``<output_dir>/completions.jsonl`` (each problem, the completion, the extracted and gold answers).
``--model`` takes what recipes/gsm8k_tiny.py does (a hub id, a folder, a .gguf file), including
the folder it saves. The prompt is the same system prompt + question the training recipe uses.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from grpo_seq.cli import cli_errors, parse_config, require
from grpo_seq.data import check_prompt_lengths, chat_prompts, greedy_completions, load_rows, row_place
from grpo_seq.models import load_model_and_tokenizer
from grpo_seq.rewards import check_rows
from grpo_seq.serialization import atomic_write_text
from reward_fns import (
    GSM8K_INSTRUCTION, GSM8K_SYSTEM_PROMPT, correctness_reward, extract_answer, format_reward, has_answer_line,
)

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the training recipe's (recipes/gsm8k_tiny.py)


@dataclass
class EvalConfig:
    model: str = field(default=DEFAULT_MODEL, metadata={"help": "Hub id, local folder (e.g. a saved run's model/) or .gguf file."})
    dataset: str = field(default="openai/gsm8k", metadata={"help": "Hub id or local JSONL with question and answer."})
    dataset_config: str = field(default="main", metadata={"help": "Hub dataset configuration."})
    dataset_split: str = field(default="test", metadata={"help": "Hub dataset split."})
    limit: int = field(default=0, metadata={"help": "Evaluate the first N problems only (0: all)."})
    max_new_tokens: int = field(default=256, metadata={"help": "Most tokens per answer."})
    batch_size: int = field(default=16, metadata={"help": "Problems per generate call."})
    system_prompt: str = field(default=GSM8K_SYSTEM_PROMPT, metadata={"help": "System message before each problem ('' for none)."})
    instruction: str = field(default=GSM8K_INSTRUCTION, metadata={"help": "Appended to each question ('' for none)."})
    dtype: str = field(default="float32", metadata={"help": "float32 or bfloat16."})
    torch_threads: int = field(default=0, metadata={"help": "torch CPU threads (0: torch's default)."})
    output_dir: str = field(default="runs/eval_gsm8k", metadata={"help": "Where eval.json and completions.jsonl go."})

    def __post_init__(self) -> None:
        for name in ("limit", "torch_threads"):
            require(self, name, getattr(self, name) >= 0, "must be >= 0")
        for name in ("max_new_tokens", "batch_size"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")


def main(cfg: EvalConfig) -> dict:
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    source = f"--dataset {cfg.dataset}"
    rows = chat_prompts(load_rows(cfg.dataset, cfg.dataset_split, cfg.dataset_config),
                        system_prompt=cfg.system_prompt or None, instruction=cfg.instruction or None, source=source)
    if cfg.limit:
        rows = rows[: cfg.limit]
    # Every gold answer now: a bad one found after generating would waste the whole evaluation.
    check_rows([correctness_reward], ["correctness"], rows, source)
    model, tokenizer = load_model_and_tokenizer(cfg.model, cfg.dtype)
    model.eval()
    prompts, answers = [r["prompt"] for r in rows], [r["answer"] for r in rows]
    check_prompt_lengths(tokenizer, prompts, cfg.max_new_tokens, getattr(model.config, "max_position_embeddings", None),
                         lambda i: row_place(rows, i, source))

    t0 = time.perf_counter()
    completions = greedy_completions(model, tokenizer, prompts, cfg.max_new_tokens, cfg.batch_size)
    seconds = time.perf_counter() - t0
    correct = correctness_reward(prompts, completions, answer=answers)
    formatted = format_reward(prompts, completions)

    result = {
        "accuracy": sum(correct) / len(rows),
        "n": len(rows),
        "format_rate": sum(map(has_answer_line, completions)) / len(rows),
        "clean_format_rate": sum(f == 1.0 for f in formatted) / len(rows),
        "model": cfg.model,
        "dataset": cfg.dataset,
        "max_new_tokens": cfg.max_new_tokens,
        "seconds": round(seconds, 1),
    }
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"question": p[-1]["content"], "format_reward": f, "completion": c, "extracted": extract_answer(c),
                    "gold": str(a).split("####")[-1].strip(), "correct": bool(k)})
        for p, c, a, k, f in zip(prompts, completions, answers, correct, formatted)
    ]
    atomic_write_text(out / "completions.jsonl", "\n".join(lines) + "\n")
    atomic_write_text(out / "eval.json", json.dumps(result, indent=2))
    print(json.dumps(result))
    return result


def cli(argv: list[str] | None = None) -> dict:
    """``main`` from the command line: bad usage ends as one ``error: ...`` line (exit 2)."""
    with cli_errors():
        return main(parse_config(EvalConfig, argv))


if __name__ == "__main__":
    cli()
