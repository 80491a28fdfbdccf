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

from grpo_seq.cli import parse_config
from grpo_seq.data import chat_prompts, greedy_completions, load_rows
from grpo_seq.models import load_model_and_tokenizer
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


def main(cfg: EvalConfig) -> dict:
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    rows = load_rows(cfg.dataset, cfg.dataset_split, cfg.dataset_config)
    if cfg.limit:
        rows = rows.select(range(min(cfg.limit, len(rows))))
    rows = chat_prompts(rows, system_prompt=cfg.system_prompt or None, instruction=cfg.instruction or None, source=f"--dataset {cfg.dataset}")
    model, tokenizer = load_model_and_tokenizer(cfg.model, cfg.dtype)
    model.eval()

    t0 = time.perf_counter()
    completions = greedy_completions(model, tokenizer, rows["prompt"], cfg.max_new_tokens, cfg.batch_size)
    seconds = time.perf_counter() - t0
    correct = correctness_reward(rows["prompt"], completions, answer=rows["answer"])
    formatted = format_reward(rows["prompt"], completions)

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
        for p, c, a, k, f in zip(rows["prompt"], completions, rows["answer"], correct, formatted)
    ]
    atomic_write_text(out / "completions.jsonl", "\n".join(lines) + "\n")
    atomic_write_text(out / "eval.json", json.dumps(result, indent=2))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(parse_config(EvalConfig))
