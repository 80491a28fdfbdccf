"""grpo_seq/scoring/heldout.py: the held-out figures of a run and the best constant answer, without a model."""

from __future__ import annotations

import pytest

from grpo_seq.scoring.heldout import HeldOutSet, best_constant_of, compare, majority_answer, summary_line
from grpo_seq.scoring.rewards import RewardScorer
from grpo_seq.math.stats import newcombe_paired_interval, wilson_interval


def exact(completions, answer, **kwargs):
    return [float(c[0]["content"].strip() == f"<a>{a}</a>") for c, a in zip(completions, answer)]


def tagged(completions, **kwargs):
    return [float(c[0]["content"].startswith("<a>")) for c in completions]


ROWS = [{"prompt": [{"role": "user", "content": f"q{i}"}], "answer": a} for i, a in enumerate("1121131121")]


def heldout() -> HeldOutSet:
    return HeldOutSet(ROWS, RewardScorer([exact, tagged]), "exact", "<a>{answer}</a>")


def test_the_constant_answer_is_scored_by_the_metric_on_every_item():
    h = heldout()
    assert h.constant_scores("<a>1</a>") == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert h.constant_scores("<a>7</a>") == [0.0] * 10  # 'tagged' would give 1: only the metric counts
    # candidates: the models' completions (most frequent first), then the gold answers in the format
    answered = [{"completion": " <a>2</a> "}, {"completion": "<a>2</a>"}, {"completion": "no"}]
    assert h.candidates(answered) == ["<a>2</a>", "no", "<a>1</a>", "<a>3</a>"]
    assert best_constant_of(h, answered) == ("<a>1</a>", h.constant_scores("<a>1</a>"))  # "1" is 7 of 10


def test_compare_pairs_the_items_and_holds_the_constant_answer_beside():
    base = [0, 1, 0, 0, 1, 0, 0, 0, 0, 0]
    trained = [1, 1, 1, 1, 0, 0, 1, 1, 0, 1]  # right on 5 more, wrong on 1 the base got
    constant = ("<a>1</a>", [1, 1, 0, 1, 1, 0, 1, 1, 0, 1])
    out = compare(base, trained, constant)
    assert out["n"] == 10 and out["binary"]
    assert out["base"] == {"score": 0.2, "interval": list(wilson_interval(2, 10)), "right": 2}
    assert out["trained"]["score"] == 0.7 and out["trained"]["right"] == 7
    d = out["trained_minus_base"]
    assert d["value"] == pytest.approx(0.5) and (d["better"], d["worse"]) == (6, 1)
    assert d["interval"] == pytest.approx(list(newcombe_paired_interval(1, 1, 6, 2)))
    # the trained model equals always answering "1" (7 of 10): no gain over it
    assert out["best_constant"]["score"] == 0.7 and out["trained_minus_constant"]["value"] == 0.0
    assert out["scores"] == {"base": base, "trained": trained, "best_constant": constant[1]}  # per item, for pairing
    assert compare(base, None, None).keys() == {"n", "binary", "base", "scores"}


def test_the_summary_line_says_when_an_interval_holds_zero():
    result = {"metric": "exact", **compare([0, 1, 0, 0], [1, 1, 0, 0], ("<a>1</a>", [1, 1, 1, 0]))}
    line = summary_line(result)
    assert line.startswith("held-out, 4 items (exact): base 25.0% [") and "-> trained 50.0% [" in line
    assert "difference +25.0 points [" in line and "(the interval holds 0: no gain shown)" in line
    assert "best constant answer '<a>1</a>' 75.0%" in line and "trained minus it -25.0 points" in line
    worse = summary_line({"metric": "exact", **compare([1] * 20, [0] * 20, None)})  # every item lost
    assert "difference -100.0 points [" in worse and "(the interval is below 0: the trained model is worse)" in worse
    base_only = summary_line({"metric": "exact", **compare([0, 1, 0, 0], None, ("<a>1</a>", [1, 1, 1, 0]))})
    assert "trained" not in base_only and "base minus it -50.0 points" in base_only


def test_the_majority_answer_scores_the_items_that_share_the_most_common_one():
    rows = [{"answer": "2"}, {"answer": 1}, {"answer": "1"}, {"answer": "3"}]
    assert majority_answer(rows) == ("1", [0.0, 1.0, 1.0, 0.0])  # 1 and "1" are one answer
    assert majority_answer([{"answer": "a"}, {"answer": "b"}]) == ("a", [1.0, 0.0])  # a tie: the first seen
    assert majority_answer([{"answer": "2"}, {"question": "no answer"}]) is None
    assert majority_answer([]) is None
