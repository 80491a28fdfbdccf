"""reward_fns.math_answer.math_correctness: math-verify behind a correctness reward.

It must agree with GSM8K's own ``#### n`` rule (reward_fns.gsm8k.correctness_reward) where that
rule applies, and read what the rule cannot: boxed answers, fractions, LaTeX, units."""

from __future__ import annotations

import json
import random
import re
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("math_verify")

from grpo_seq.scoring.rewards import RewardScorer  # noqa: E402
from reward_fns import correctness_reward, math_correctness  # noqa: E402
from reward_fns.math_answer import final_answer, gold_answer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k"  # read where it lies: never copied into the repository
SAMPLE = 500  # rows of dev + train (7,792 in all; every one agreed when checked: 14 s on 2 cores)


def gsm8k_golds() -> list[str]:
    files = [GSM8K / name for name in ("dev.jsonl", "train.jsonl") if (GSM8K / name).is_file()]
    if not files:
        pytest.skip(f"no GSM8K at {GSM8K}")
    golds = [json.loads(line)["answer"] for f in files for line in f.read_text().splitlines() if line.strip()]
    return random.Random(0).sample(golds, min(SAMPLE, len(golds)))


def perturbed(gold: str) -> str:
    """The solution with its final number changed (one more)."""
    head, _, tail = gold.rpartition("####")
    number = tail.strip().replace(",", "")
    assert re.fullmatch(r"-?\d+", number), tail
    return f"{head}#### {int(number) + 1}"


def test_agrees_with_the_gsm8k_rule_on_gold_answers_and_perturbed_ones():
    golds = gsm8k_golds()
    start = time.perf_counter()
    assert math_correctness(completions=golds, answer=golds) == [1.0] * len(golds)
    wrong = [perturbed(g) for g in golds]
    assert math_correctness(completions=wrong, answer=golds) == [0.0] * len(golds)
    seconds = time.perf_counter() - start
    assert correctness_reward(completions=golds, answer=golds) == [1.0] * len(golds)
    assert correctness_reward(completions=wrong, answer=golds) == [0.0] * len(golds)
    assert seconds < 10, f"{2 * len(golds)} completions took {seconds:.1f} s"


@pytest.mark.parametrize("completion, gold, expected", [
    ("so \\boxed{3/4}", "0.75", 1.0),
    ("so \\boxed{\\frac{3}{4}}", "0.75", 1.0),
    ("The final answer is $\\frac{3}{4}$", "3/4", 1.0),
    ("The answer is 0.75.", "\\frac{3}{4}", 1.0),
    ("\\boxed{0.7}", "3/4", 0.0),
    ("#### 1,234", "1234", 1.0),
    ("#### 18 dollars", "18", 1.0),  # units: the GSM8K rule refuses these, math-verify reads them
    ("\\boxed{5\\text{ cm}}", "5", 1.0),
    ("Answer: $\\sqrt{2}$", "\\sqrt{2}", 1.0),
    ("$\\boxed{\\frac{\\pi}{2}}$", "\\frac{\\pi}{2}", 1.0),
    ("\\boxed{\\pi/2}", "\\frac{\\pi}{2}", 1.0),
    ("\\boxed{x^2 + 2x + 1}", "(x+1)^2", 1.0),
    ("\\boxed{(1, 2)}", "(1, 2)", 1.0),
    ("\\boxed{2}", "(1, 2)", 0.0),
    ("She makes 18 dollars a day.", "18", 0.0),  # no anchor: a number in the working is not an answer
    ("#### 17\nor maybe \\boxed{18}", "18", 0.0),  # the #### line is the answer the model committed to
    ("", "18", 0.0),
])
def test_hand_written_answers(completion, gold, expected):
    assert math_correctness(completions=[completion], answer=[gold]) == [expected]


def test_chat_completions_and_a_gsm8k_solution_as_gold():
    gold = "She sells 16 - 3 - 4 = <<16-3-4=9>>9 eggs.\nShe makes 9 * 2 = $<<9*2=18>>18.\n#### 18"
    chat = [[{"role": "assistant", "content": "9 eggs at $2.\n\\boxed{18}"}]]
    assert math_correctness(prompts=["q"], completions=chat, answer=[gold]) == [1.0]


def test_bad_gold_answers_and_columns_are_refused_before_training():
    with pytest.raises(ValueError, match="column 'answer'"):
        math_correctness(completions=["#### 1"])
    with pytest.raises(ValueError, match="2 gold answers for 1 completions"):
        math_correctness(completions=["#### 1"], answer=["1", "2"])
    with pytest.raises(ValueError, match="no answer math-verify can read"):
        gold_answer("#### eighteen")
    scorer = RewardScorer(["reward_fns.math_answer:math_correctness"])
    with pytest.raises(ValueError, match="row 2: reward function 'math_correctness' cannot score this row"):
        scorer.check_dataset([{"prompt": "q", "answer": "3"}, {"prompt": "q", "answer": "#### ?"}])


def test_works_outside_the_main_thread():
    """math-verify's timeout is signal.alarm, main thread only: elsewhere the reward runs without it."""
    out: dict = {}

    def score() -> None:
        try:
            out["value"] = math_correctness(completions=["\\boxed{3/4}", "#### 2"], answer=["0.75", "3"])
        except Exception as e:  # noqa: BLE001 - reported below
            out["error"] = e

    worker = threading.Thread(target=score)
    worker.start()
    worker.join(30)
    assert out == {"value": [1.0, 0.0]}


def test_final_answer_reads_the_committed_line():
    assert final_answer("work 5 + 6\n#### 11\nthanks 3")[0] == 11
    assert final_answer("I computed 6 * 7 = 42 so far") == []  # no anchor
