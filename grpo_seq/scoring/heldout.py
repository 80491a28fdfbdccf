"""A language model scored on held-out prompts, and two models compared on the same items.

What tells learning from noise and from a collapse to one answer:

- each model's score with its 95% interval (:func:`grpo_seq.math.stats.mean_interval`);
- the paired difference, trained minus base, with its interval and, for right/wrong scores, the
  exact McNemar p-value (:func:`grpo_seq.math.stats.paired_difference`);
- the best constant answer: the one completion that, given to every item, scores best (candidates:
  the answers both models gave, and each gold ``answer`` written as ``eval_answer_format``), and
  the trained model's paired difference against it. A policy that learned to answer "1" to every
  counting question beats the base model without having learned to count; it does not beat this.

An item's score is the value of one reward function (the metric; a function that does not
score an item gives it 0). A training run does this before and after
(:mod:`grpo_seq.jobs.heldout`); ``grpo-seq eval lm`` scores one model with the same figures.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from ..generation.greedy import greedy_completions
from .rewards import RewardScorer
from ..math.stats import best_constant, is_binary, mean_interval, paired_difference

__all__ = ["HeldOutSet", "compare", "summary_line", "score_greedy", "best_constant_of", "majority_answer",
           "MAX_CONSTANT_CANDIDATES"]

MAX_CONSTANT_CANDIDATES = 40  # the most frequent answers of each kind tried as the constant answer


@dataclass
class HeldOutSet:
    """The held-out rows and how they are answered and scored."""

    rows: Sequence[dict]
    scorer: RewardScorer
    metric: str
    answer_format: str = "{answer}"
    max_new_tokens: int = 64
    batch_size: int = 16

    def answer(self, model: Any, tokenizer: Any) -> list[dict]:
        """One greedy completion per row, each record with its ``score`` (the metric's value, 0 if unscored)."""
        _, records = score_greedy(model, tokenizer, self.rows, self.scorer, self.max_new_tokens, self.batch_size)
        out = []
        for i, (row, rec) in enumerate(zip(self.rows, records)):
            value = rec["rewards"].get(self.metric)
            out.append({"item": i, **rec, "answer": row.get("answer"), "score": 0.0 if value is None else float(value)})
        return out

    def _completion(self, text: str) -> Any:
        return text if isinstance(self.rows[0]["prompt"], str) else [{"role": "assistant", "content": text}]

    def constant_scores(self, text: str) -> list[float]:
        """The metric's value on every row when ``text`` is the completion of each."""
        prompts = [r["prompt"] for r in self.rows]
        columns = {k: [r.get(k) for r in self.rows] for k in self.rows[0] if k != "prompt"}
        _, parts = self.scorer.score(prompts, [self._completion(text)] * len(self.rows), columns)
        values = parts[self.scorer.names.index(self.metric)]
        return [0.0 if v is None else float(v) for v in values]

    def candidates(self, *answered: Sequence[dict]) -> list[str]:
        """The constant answers to try: the models' most frequent completions, and the most
        frequent gold answers as ``answer_format`` writes them."""
        given = Counter(r["completion"].strip() for records in answered for r in records)
        gold = Counter(str(r["answer"]) for r in self.rows if r.get("answer") is not None)
        texts = [t for t, _ in given.most_common(MAX_CONSTANT_CANDIDATES)]
        texts += [self.answer_format.format(answer=a) for a, _ in gold.most_common(MAX_CONSTANT_CANDIDATES)]
        return list(dict.fromkeys(texts))


def _figures(scores: Sequence[float]) -> dict:
    low, high = mean_interval(scores)
    return {"score": sum(scores) / len(scores), "interval": [low, high], **(
        {"right": int(sum(scores))} if is_binary(scores) else {})}


def compare(base: Sequence[float], trained: Sequence[float] | None,
            constant: tuple[str, Sequence[float]] | None) -> dict:
    """The figures of ``eval.json`` from per-item scores: each model's score and interval, the
    paired difference trained minus base, the best constant answer and the trained model against it."""
    out: dict[str, Any] = {"n": len(base), "binary": is_binary(base) and is_binary(trained or base),
                           "base": _figures(base)}
    out["scores"] = {"base": list(base), **({"trained": list(trained)} if trained is not None else {}),
                     **({"best_constant": list(constant[1])} if constant is not None else {})}  # per item, for pairing
    if trained is not None:
        out["trained"] = _figures(trained)
        out["trained_minus_base"] = paired_difference(base, trained)
    if constant is not None:
        text, scores = constant
        out["best_constant"] = {"completion": text, **_figures(scores)}
        out["base_minus_constant"] = paired_difference(scores, base)
        if trained is not None:
            out["trained_minus_constant"] = paired_difference(scores, trained)
    return out


def _pct(x: float, binary: bool) -> str:
    return f"{100 * x:.1f}%" if binary else f"{x:.3f}"


def _points(d: dict, binary: bool) -> str:
    lo, hi = d["interval"]
    scale, unit = (100, " points") if binary else (1, "")
    p = f", McNemar p {d['p_value']:.2g}" if "p_value" in d else ""
    return f"{scale * d['value']:+.1f}{unit} [{scale * lo:+.1f}, {scale * hi:+.1f}]{p}"


def summary_line(result: dict) -> str:
    """One line for the end of a run: scores, the difference and the best constant answer, each with its interval."""
    b = result["binary"]

    def score(key: str) -> str:
        f = result[key]
        return f"{_pct(f['score'], b)} [{_pct(f['interval'][0], b)}, {_pct(f['interval'][1], b)}]"

    line = f"held-out, {result['n']} items ({result['metric']}): base {score('base')}"
    if "trained" in result:
        line += f" -> trained {score('trained')}; difference {_points(result['trained_minus_base'], b)}"
        low, high = result["trained_minus_base"]["interval"]
        if high < 0:
            line += " (the interval is below 0: the trained model is worse)"
        elif not low > 0:
            line += " (the interval holds 0: no gain shown)"
    if "best_constant" in result:
        line += f"; best constant answer {result['best_constant']['completion']!r:.40} {score('best_constant')}"
        if "trained_minus_constant" in result:
            line += f", trained minus it {_points(result['trained_minus_constant'], b)}"
        else:
            line += f", base minus it {_points(result['base_minus_constant'], b)}"
    return line


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


def best_constant_of(heldout: HeldOutSet, *answered: Sequence[dict]) -> tuple[str, list[float]] | None:
    """The best constant answer on ``heldout``'s items, among the completions in ``answered`` and
    the gold answers (:meth:`HeldOutSet.candidates`), with its per-item scores."""
    return best_constant(heldout.candidates(*answered), heldout.constant_scores)


def majority_answer(rows: Sequence[dict], key: str = "answer") -> tuple[str, list[float]] | None:
    """The majority baseline of items scored by a program of their own (an agent's rollout): the
    gold ``key`` that, given to every row and scored by exact match, scores best (the most common;
    the first seen on ties), with its per-row scores. None unless every row has one."""
    answers = [str(row[key]) if isinstance(row, dict) and row.get(key) is not None else None for row in rows]
    if not answers or None in answers:
        return None
    return best_constant(dict.fromkeys(answers), lambda text: [float(a == text) for a in answers])
