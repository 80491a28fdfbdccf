"""Greedy accuracy and format rate of a chat model on GSM8K problems.

    python recipes/eval_gsm8k.py --dataset ../shared/data/gsm8k/dev.jsonl --limit 100 --output_dir runs/eval_base
    python recipes/eval_gsm8k.py --model runs/<run>/model --dataset ../shared/data/gsm8k/dev.jsonl --output_dir runs/eval_after

The program is grpo_seq/jobs/eval_lm.py (also the installed `grpo-seq eval lm`); this file gives it
GSM8K's defaults (the training recipe's model, prompt and rewards: recipes/gsm8k_tiny.py) and
GSM8K's measures. Writes ``<output_dir>/eval.json`` (``accuracy``; ``n``; ``format_rate``: share
of answers with a ``#### <number>`` line; ``clean_format_rate``: share that end with it alone,
format reward 1; and the general evaluator's ``reward`` and ``rewards/<fn>``) and
``<output_dir>/completions.jsonl`` (each problem, the completion, its rewards, the extracted and
gold answers). Without ``--output_dir`` each evaluation gets a new folder,
``runs/eval_gsm8k__<unix time>``; a folder holding an evaluation is refused unless ``--overwrite``.
``--model`` takes what recipes/gsm8k_tiny.py does (a hub id, a folder, a .gguf file), including
the folder it saves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from grpo_seq.cli import cli_errors, parse_config
from grpo_seq.cli.programs import working_folder_importable
from grpo_seq.jobs.eval_lm import EvalLMConfig, evaluate
from reward_fns import (
    GSM8K_INSTRUCTION, GSM8K_SYSTEM_PROMPT, REGISTRY, correctness_reward, extract_answer, format_reward, has_answer_line,
)

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the training recipe's (recipes/gsm8k_tiny.py)


@dataclass
class GSM8KEvalConfig(EvalLMConfig):
    EVAL_NAME: ClassVar[str] = "eval_gsm8k"  # default folders: runs/eval_gsm8k__<unix time>

    model: str = field(default=DEFAULT_MODEL, metadata={"help": "Hub id, local folder (e.g. a saved run's model/) or .gguf file."})
    dataset: str = field(
        default="openai/gsm8k", metadata={"help": "Hub id, or a local .jsonl/.json/.parquet/.csv file or save_to_disk "
                                          "folder: question and answer columns, or TRL's prompt column."})
    dataset_config: str = field(default="main", metadata={"help": "Hub dataset configuration."})
    system_prompt: str = field(default=GSM8K_SYSTEM_PROMPT, metadata={"help": "System message before each problem ('' for none)."})
    instruction: str = field(default=GSM8K_INSTRUCTION, metadata={"help": "Appended to each question ('' for none)."})
    as_chat: bool = field(default=True, metadata={"help": "Send each question through the chat template."})
    answer_column: str = field(
        default="answer", metadata={"help": "The gold answer's column (given to the rewards as 'answer')."})
    reward_funcs: list[str] = field(
        default_factory=lambda: ["correctness", "format"],
        metadata={"help": "Reward functions: short names (correctness, format) or import paths (mypkg.rewards:my_fn)."})
    output_dir: str | None = field(default=None, metadata={
        "help": "Where eval.json and completions.jsonl go (default: a new folder for each evaluation, "
                "runs/eval_gsm8k__<unix time>)."})


def gsm8k_report(rows: Sequence[dict], completions: Sequence[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """GSM8K's measures of greedy ``completions`` (:data:`grpo_seq.jobs.eval_lm.Report`): ``accuracy``
    (mean correctness), ``format_rate`` (share with a ``#### <number>`` line) and
    ``clean_format_rate`` (share whose format reward is 1); per answer its format reward, the
    extracted and gold numbers and whether it is correct."""
    prompts, answers, n = [r["prompt"] for r in rows], [r["answer"] for r in rows], len(rows)
    correct = correctness_reward(prompts, completions, answer=answers)
    formatted = format_reward(prompts, completions)
    measures = {
        "accuracy": sum(correct) / n,
        "format_rate": sum(map(has_answer_line, completions)) / n,
        "clean_format_rate": sum(f == 1.0 for f in formatted) / n,
    }
    added = [{"format_reward": f, "extracted": extract_answer(c), "gold": str(a).split("####")[-1].strip(),
              "correct": bool(k)} for c, a, k, f in zip(completions, answers, correct, formatted)]
    return measures, added


def main(cfg: GSM8KEvalConfig) -> dict:
    """Evaluate one model (grpo_seq.jobs.eval_lm.evaluate with GSM8K's rewards and measures)."""
    return evaluate(cfg, registry=REGISTRY, report=gsm8k_report)


def cli(argv: list[str] | None = None) -> dict:
    """``main`` from the command line: bad usage ends as one ``error: ...`` line (exit 2); reward
    functions by import path are found in the working folder."""
    working_folder_importable()
    with cli_errors():
        return main(parse_config(GSM8KEvalConfig, argv))


if __name__ == "__main__":
    cli()
