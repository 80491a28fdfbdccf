"""Which reasoning-gym tasks can the base model learn from? Its greedy score on held-out items.

    python benchmarks/reasoning_gym_base.py --torch_threads 1

GRPO learns only from groups whose completions score differently: a task the base model never
solves gives every group reward 0 (no signal), one it always solves gives 1 (no signal either).
This measures SmolLM2-135M-Instruct (the recipes' model) greedily on --n held-out items of each
candidate task, as recipes/reasoning_gym.py prompts them (its default number of worked examples,
the answer between <answer> tags, scored by the task's own score_answer), and writes
benchmarks/results/reasoning_gym_base/result.json: per task its options, the mean score, the share
of answers given in tags and the seconds. A task scoring between 5% and 50% is a good default
for the recipe. ``python benchmarks/report.py`` puts the table into docs/guides/reasoning-tasks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_seq.errors import UsageError  # noqa: E402
from grpo_seq.eval_lm import score_greedy  # noqa: E402
from grpo_seq.models import load_model_and_tokenizer  # noqa: E402
from grpo_seq.rewards import RewardScorer  # noqa: E402
from grpo_seq.sources.reasoning_gym import DEFAULT_SHOTS, task_items, task_rows  # noqa: E402
from reward_fns.reasoning_gym import extract_tagged_answer, task_score  # noqa: E402

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)

# Candidates: reasoning-gym's defaults, and an easier setting of the arithmetic and counting tasks.
CANDIDATES = [
    "basic_arithmetic", 'basic_arithmetic:{"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}',
    "chain_sum", 'chain_sum:{"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}',
    "leg_counting", 'leg_counting:{"min_animals": 1, "max_animals": 2, "max_instances": 3}',
    "letter_counting", "spell_backward", "word_sorting", "word_sequence_reversal",
]


def candidate(text: str) -> tuple[str, dict]:
    """``task`` or ``task:{JSON options}``."""
    task, _, options = text.partition(":")
    return task, json.loads(options) if options else {}


def measure(model, tokenizer, task: str, options: dict, a: argparse.Namespace) -> dict:
    """Greedy completions of ``a.n`` held-out items of one task, scored by its score_answer."""
    train = task_items(task, options, "train", a.seed, a.size)
    held_out = task_items(task, options, "test", a.seed, a.size, count=a.n)
    rows = task_rows(held_out, train, a.shots)
    scorer = RewardScorer([task_score(task, options)])
    start = time.perf_counter()
    metrics, records = score_greedy(model, tokenizer, rows, scorer, a.max_new_tokens, a.batch_size)
    tagged = [extract_tagged_answer(r["completion"]) is not None for r in records]
    return {"task": task, "options": options, "n": len(rows), "score": metrics[f"rewards/{task}"],
            "solved": sum(r["reward"] == 1.0 for r in records), "tagged": sum(tagged) / len(tagged),
            "seconds": round(time.perf_counter() - start, 1), "first_completion": records[0]["completion"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    ap.add_argument("--tasks", nargs="+", default=CANDIDATES, help="task or task:{JSON options}, each")
    ap.add_argument("--n", type=int, default=40, help="held-out items per task")
    ap.add_argument("--max_new_tokens", type=int, default=64)
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--shots", type=int, default=DEFAULT_SHOTS)
    ap.add_argument("--seed", type=int, default=0, help="the training items' generator seed (held out: seed + 1,000,003)")
    ap.add_argument("--size", type=int, default=1000, help="training items (the held-out ones exclude their questions)")
    ap.add_argument("--torch_threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=record.default_out("reasoning_gym_base"))
    a = ap.parse_args()
    torch.set_num_threads(a.torch_threads)
    model, tokenizer = load_model_and_tokenizer(a.model)
    result: dict = {"meta": record.meta(), "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
                    "rows": []}
    for text in a.tasks:
        try:
            row = measure(model, tokenizer, *candidate(text), a)
        except UsageError as e:  # e.g. too few distinct questions for held-out items: say so, go on
            row = {"task": candidate(text)[0], "options": candidate(text)[1], "error": str(e)}
        result["rows"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "first_completion"}), flush=True)
        record.prepare(a.out).write_text(json.dumps(result, indent=2))  # each task as it ends


if __name__ == "__main__":
    main()
