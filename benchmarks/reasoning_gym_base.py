"""Which reasoning-gym tasks can the base model learn from? Its greedy score on held-out items.

    python benchmarks/reasoning_gym_base.py --torch_threads 1

GRPO learns only from groups whose completions score differently: a task the base model never
solves gives every group reward 0 (no signal), one it always solves gives 1 (no signal either).
This measures SmolLM2-135M-Instruct (the recipes' model) greedily on held-out items of every
reasoning-gym task, prompted as recipes/reasoning_gym.py prompts them (its default number of
worked examples, the answer between <answer> tags, scored by the task's own score_answer).

Candidates (:func:`candidates`): for each task an *easiest* setting and a *one step harder* one,
derived from its config's fields (a ``min_X``/``max_X`` pair of ints: ``max_X = min_X``, then
``min_X + 1``; a value range such as ``min_value``/``max_value``: its lowest 100 values, then
1,000; an int ``difficulty``: 1, then 2), :data:`OVERRIDES` where that rule is wrong, and
reasoning-gym's defaults where a task has no difficulty knob. The recipe's current candidates
(:data:`ALWAYS`) are measured too.

Two passes: *screening*, greedy on ``--screen_n`` held-out items of every candidate (a task's
harder setting only where its easiest one solved at least ``--confirm_min``; prompts over
``--max_prompt_tokens``: skipped, CPU time grows with them); then
*confirmation*, ``--n`` held-out items of each candidate that solved at least one in screening (and
of :data:`ALWAYS`; past ``--confirm_budget_s``, only those solving 5-60% in screening), its first
``--screen_n`` the screening's own completions (the same prompts: item i's worked example depends
on i alone). Held-out items are the recipe's: ``task_items(task, options, "test", seed, size,
count=n)``, seed 0, size 1000 training items; a task with too few distinct held-out questions (or
too slow a generator, ``--gen_timeout``) gets ``size`` 200, and is skipped with the reason if that
fails too, as is a task whose generator fails or whose config refuses the setting.

A confirmed row has the solved count (score_answer 1: the recipe's reward without partial
credit), its 95% Wilson interval, the mean score with partial credit, the share of answers in
tags, the best constant answer (each distinct gold answer among the items, answered to every item
through the same scorer: the majority baseline a collapsed policy reaches) and every item's gold
answer, extracted answer and score, for paired comparisons later.

Writes benchmarks/results/reasoning_gym_base/result.json (``screen``, ``rows``, ``skipped``);
``python benchmarks/report.py`` puts the table into docs/guides/reasoning-tasks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_seq.errors import UsageError  # noqa: E402
from grpo_seq.jobs.eval_lm import score_greedy  # noqa: E402
from grpo_seq.scoring.rewards import RewardScorer  # noqa: E402
from grpo_seq.io.sources.reasoning_gym import DEFAULT_SHOTS, task_items, task_rows  # noqa: E402
from reward_fns.reasoning_gym import extract_tagged_answer, task_score  # noqa: E402

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)

Z95 = 1.959963984540054

# The recipe's candidates so far: always confirmed, whatever their screening says.
ALWAYS = [("letter_counting", {}),
          ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}),
          ("spell_backward", {})]

# Tasks the rule gets wrong: (easiest, harder); None is reasoning-gym's defaults.
OVERRIDES: dict[str, tuple[dict | None, dict | None]] = {
    "ab": ({"length": 4}, {"length": 5}),
    "advanced_geometry": ({"min_coord": 0, "max_coord": 5}, None),
    "aiw": ({"max_entities": 3}, {"max_entities": 4}),
    "base_conversion": ({"max_base": 10, "max_value": 10}, {"max_base": 10, "max_value": 100}),
    "caesar_cipher": ({"max_words": 3}, {"max_words": 4}),  # rotation 1: the 3-word texts repeat
    "calendar_arithmetic": ({"offset_upper_bound": 7}, None),
    "coin_flip": (None, None),  # 3 or 4 trials: a handful of questions
    "complex_arithmetic": ({"min_real": 0, "max_real": 5, "min_imag": 0, "max_imag": 5, "operations": ["+"],
                            "operations_weights": [1.0]},
                           {"min_real": 0, "max_real": 5, "min_imag": 0, "max_imag": 5, "operations": ["+", "-"],
                            "operations_weights": [0.5, 0.5]}),
    "count_bits": ({"max_n": 1023}, {"max_n": 65535}),  # n is a value here, and 1..1 one question
    "count_primes": ({"max_n": 100}, {"max_n": 1000}),
    "countdown": ({"min_numbers": 3, "max_numbers": 3, "min_target": 10, "max_target": 100},
                  {"min_numbers": 3, "max_numbers": 4, "min_target": 10, "max_target": 100}),
    "dice": ({"num_dice": 3, "max_dice_size": 20}, None),  # fewer dice or sides: too few distinct questions
    "game_of_life": ({"grid_size_x": 4, "grid_size_y": 4, "filled_cells": 4},
                     {"grid_size_x": 5, "grid_size_y": 5, "filled_cells": 5}),
    "game_of_life_halting": ({"num_oscillators": 1}, {"num_oscillators": 2}),  # difficulty 2 needs a 13x13 grid
    "graph_color": ({"min_num_vertices": 6, "max_num_vertices": 6}, {"min_num_vertices": 6, "max_num_vertices": 7}),
    "intermediate_integration": (None, None),  # smaller degrees: the generator fails
    "jugs": (None, None),  # difficulty 1, 2 or 5: too few distinct puzzles
    "knights_knaves": (None, None),  # depth or width 1: the generator fails
    "largest_island": ({"max_rows": 5, "max_cols": 5}, {"max_rows": 6, "max_cols": 6}),  # islands from 0: often 0
    "lcm": ({"max_value": 20}, None),
    "letter_jumble": ({"min_word_len": 3, "max_word_len": 3, "max_words": 3},  # words of 1 letter: nothing jumbled
                      {"min_word_len": 3, "max_word_len": 4, "max_words": 4}),
    "maze": ({"max_dist": 6}, None),  # max_dist 5: the answer is always 5; smaller grids: the generator fails
    "mini_sudoku": ({"min_empty": 2, "max_empty": 2}, {"min_empty": 2, "max_empty": 3}),
    "number_format": ({"max_num_candidates": 2}, {"max_num_candidates": 3}),
    "number_sequence": ({"max_terms": 4, "max_complexity": 1}, {"max_terms": 5, "max_complexity": 2}),
    "power_function": ({"min_exponent": 1, "max_exponent": 1}, {"min_exponent": 1, "max_exponent": 2}),  # 0: always 1
    "prime_factorization": ({"max_value": 500}, None),  # 2..101: too few distinct questions
    "rectangle_count": ({"max_rectangles": 2, "width": 20, "height": 20}, {"max_rectangles": 3, "width": 20, "height": 20}),
    "rush_hour": ({"max_moves": 5}, {"max_moves": 10}),  # 1 or 2 moves: one puzzle
    "sentence_reordering": ({"max_words_in_sentence": 4}, {"max_words_in_sentence": 5}),  # 3 words: too few
    "sokoban": ({"min_w": 6, "max_w": 6, "min_h": 6, "max_h": 6, "min_boxes": 1, "max_boxes": 1},
                {"min_w": 6, "max_w": 6, "min_h": 6, "max_h": 6, "min_boxes": 1, "max_boxes": 2}),
    "string_splitting": (None, None),  # 1 machine: a handful of questions
    "string_synthesis": (None, None),  # 1 block: a handful of questions
    "survo": ({"max_board_size": 4, "max_empty": 3}, {"max_board_size": 4, "max_empty": 4}),  # num: the board's values
    "time_intervals": ({"task_types": ["time"]}, None),
    "word_ladder": ({"min_word_length": 3, "max_word_length": 3}, None),
    "zebra_puzzles": ({"num_people": 2, "num_characteristics": 2}, {"num_people": 3, "num_characteristics": 3}),
}
# Tasks not measured at all, and why.
EXCLUDED = {"composite": "a mixture of other tasks (needs its datasets spec), not a task of its own"}
# min_X/max_X pairs that are a range of values, not a count: narrowed to 100, then 1,000 values
VALUE_WORDS = ("value", "coord", "real", "imag", "target", "factor", "bounds")
# pairs left alone: their range is no difficulty (angles of a polygon, dates)
LEAVE_WORDS = ("angle", "time", "date", "base")


def _defaults(config_cls: type) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(config_cls):
        if f.name in ("seed", "size"):
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[f.name] = f.default_factory()  # type: ignore[misc]
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def rule_settings(config_cls: type) -> tuple[dict, dict]:
    """(easiest, harder) options by the rule in the module's docstring; empty dicts: no knob."""
    d = _defaults(config_cls)
    easy: dict[str, Any] = {}
    hard: dict[str, Any] = {}
    for name, lo in d.items():
        if not name.startswith("min_"):
            continue
        x = name[4:]
        hi = d.get(f"max_{x}")
        if not (_is_int(lo) and _is_int(hi)) or hi <= lo or any(w in x for w in LEAVE_WORDS):
            continue
        if any(w in x for w in VALUE_WORDS):
            if hi - lo > 99:
                easy[f"max_{x}"] = lo + 99
                hard[f"max_{x}"] = lo + 999 if hi - lo > 999 else hi
        else:
            easy[f"max_{x}"] = lo
            hard[f"max_{x}"] = lo + 1
    if _is_int(d.get("difficulty")) or ("difficulty" in d and d["difficulty"] is None):
        easy["difficulty"], hard["difficulty"] = 1, 2
    if easy:  # the harder setting moves the same knobs a step; a value range it leaves as it was stays at easy's
        hard = {**easy, **hard}
    return easy, hard


def candidates(tasks: list[str] | None = None) -> tuple[list[dict], list[dict]]:
    """``([{task, options, level}], [{task, options, level, skipped}])``: each task's easiest and
    harder settings (or its defaults), then :data:`ALWAYS`; settings that come to the same config
    are measured once, with every label."""
    from reasoning_gym.factory import DATASETS

    out: list[dict] = []
    skipped: list[dict] = []
    for task in sorted(DATASETS) if tasks is None else tasks:
        if task in EXCLUDED:
            skipped.append({"task": task, "options": {}, "level": "default", "skipped": EXCLUDED[task]})
            continue
        if task in OVERRIDES:
            easy, hard = OVERRIDES[task]
        else:
            easy, hard = rule_settings(DATASETS[task][1])
        if not easy and not hard:  # no difficulty knob: reasoning-gym's defaults
            out.append({"task": task, "options": {}, "level": "default"})
            continue
        out.append({"task": task, "options": easy or {}, "level": "easiest"})
        out.append({"task": task, "options": hard or {}, "level": "harder" if hard else "harder (default)"})
    for task, options in ALWAYS:
        if tasks is None or task in tasks:
            out.append({"task": task, "options": options, "level": "current"})
    merged: dict[tuple, dict] = {}
    for c in out:
        key = (c["task"], _config_key(c["task"], c["options"]))
        if key in merged:
            merged[key]["level"] += f", {c['level']}"
            if c["level"] == "current":  # named as the recipe's candidate was
                merged[key]["options"] = c["options"]
        else:
            merged[key] = dict(c)
    return list(merged.values()), skipped


def _config_key(task: str, options: dict) -> str:
    """The full config a task's options give (defaults filled in), to find settings that are the same."""
    from reasoning_gym.factory import DATASETS

    d = _defaults(DATASETS[task][1])
    return repr(sorted({**d, **{k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}}.items(),
                       key=lambda kv: kv[0]))


class TimeLimit(BaseException):
    """A generator ran past its time (a BaseException: generators' own ``except Exception`` let it through)."""


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def stop(signum: int, frame: Any) -> None:
        raise TimeLimit()

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


class Skip(Exception):
    """A candidate that cannot be measured; the message says why."""


def items_of(task: str, options: dict, a: argparse.Namespace) -> tuple[int, list, list, list[str]]:
    """``(size, training items, held-out items, notes)``: ``max(n, screen_n)`` held-out items at
    the first of ``a.sizes`` that has enough distinct questions and generates within ``a.gen_timeout``."""
    notes: list[str] = []
    count = max(a.n, a.screen_n)
    for size in a.sizes:
        try:
            with time_limit(a.gen_timeout):
                train = task_items(task, options, "train", a.seed, size)
                held_out = task_items(task, options, "test", a.seed, size, count=count)
            return size, train, held_out, notes
        except TimeLimit:
            notes.append(f"size {size}: generating the items took over {a.gen_timeout} s")
        except UsageError as e:
            if "held-out" not in str(e):  # the config refuses the options: no other size helps
                raise Skip(str(e)) from None
            notes.append(f"size {size}: {e}")
        except Exception as e:  # noqa: BLE001 - any generator failure (network, data files, its own bugs)
            raise Skip(f"the generator failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
    raise Skip("; ".join(notes))


def wilson(k: int, n: int, z: float = Z95) -> list[float]:
    """Wilson's 95% score interval of ``k / n``."""
    p, d = k / n, 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z / d * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def prompt_rows(tokenizer, train: list, held_out: list, a: argparse.Namespace) -> tuple[list, int]:
    """The recipe's rows of ``held_out`` (``task_rows``: item i's worked example is a training item
    after position i, so the rows of the first k items are the same whatever follows) and the
    longest prompt in tokens; over ``a.max_prompt_tokens``: :class:`Skip`."""
    rows = task_rows(held_out, train, a.shots)
    longest = max(len(tokenizer(tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True),
                                add_special_tokens=False)["input_ids"]) for r in rows)
    if longest > a.max_prompt_tokens:
        raise Skip(f"prompts up to {longest} tokens, over --max_prompt_tokens {a.max_prompt_tokens}")
    return list(rows), longest


def greedy(model, tokenizer, task: str, options: dict, rows: list, a: argparse.Namespace) -> dict:
    """Greedy completions of ``rows``, each scored by the task's score_answer: ``score`` (partial
    credit kept) and ``solved`` (1.0 only for full marks: the recipe's reward)."""
    scorer = RewardScorer([task_score(task, options, partial_credit=True)])
    start = time.perf_counter()
    _, records = score_greedy(model, tokenizer, rows, scorer, a.max_new_tokens, a.batch_size)
    return {"completions": [r["completion"] for r in records], "raw": [float(r["reward"]) for r in records],
            "seconds": time.perf_counter() - start}


def summary(out: dict) -> dict:
    """n, solved, mean score (partial credit), tagged share and seconds of :func:`greedy`'s output."""
    answers = [extract_tagged_answer(c) for c in out["completions"]]
    n = len(answers)
    return {"n": n, "solved": sum(r >= 1.0 for r in out["raw"]), "score": sum(out["raw"]) / n,
            "tagged": sum(x is not None for x in answers) / n, "seconds": round(out["seconds"], 1)}


def best_constant(task: str, options: dict, held_out: list, a: argparse.Namespace) -> dict:
    """The distinct gold answer that, answered to every item (``<answer>..</answer>``), scores best
    under the recipe's reward (most frequent answers first; at most ``a.const_timeout`` seconds)."""
    fn = task_score(task, options, partial_credit=False)
    golds = [str(it["answer"]) for it in held_out]
    distinct = sorted(set(golds), key=lambda g: (-golds.count(g), golds.index(g)))
    cols = {"question": [it["question"] for it in held_out], "answer": [it["answer"] for it in held_out],
            "metadata": [it["metadata"] for it in held_out]}
    best: tuple[str, int] | None = None
    checked, start = 0, time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for g in distinct:
            if time.perf_counter() - start > a.const_timeout:
                break
            solved = int(sum(fn(completions=[f"<answer>{g}</answer>"] * len(held_out), **cols)))
            checked += 1
            if best is None or solved > best[1]:
                best = (g, solved)
    assert best is not None
    n = len(held_out)
    return {"answer": best[0], "solved": best[1], "accuracy": best[1] / n, "interval": wilson(best[1], n),
            "distinct_answers": len(distinct), "checked": checked}


def screen_one(model, tokenizer, c: dict, a: argparse.Namespace, cache: dict) -> dict:
    """Greedy on the first ``a.screen_n`` held-out items; the items, rows and completions go to ``cache``."""
    size, train, held_out, notes = items_of(c["task"], c["options"], a)
    rows, longest = prompt_rows(tokenizer, train, held_out[:max(a.n, a.screen_n)], a)
    out = greedy(model, tokenizer, c["task"], c["options"], rows[:a.screen_n], a)
    cache[id(c)] = (size, held_out, rows, out)
    row = {**c, "size": size, **summary(out), "prompt_tokens_max": longest}
    return {**row, "notes": notes} if notes else row


def prepare_confirm(tokenizer, c: dict, a: argparse.Namespace, cache: dict) -> dict:
    """The held-out items of a candidate to confirm (from ``cache`` where screening left them, else
    generated again: the same items) and its best constant answer on the first ``a.n``."""
    if id(c) not in cache:
        size, train, held_out, _ = items_of(c["task"], c["options"], a)
        rows, _ = prompt_rows(tokenizer, train, held_out[:max(a.n, a.screen_n)], a)
        cache[id(c)] = (size, held_out, rows, {"completions": [], "raw": [], "seconds": 0.0})
    start = time.perf_counter()
    const = best_constant(c["task"], c["options"], cache[id(c)][1][:a.n], a)
    const["seconds"] = round(time.perf_counter() - start, 1)
    return const


def confirm_one(model, tokenizer, c: dict, const: dict, a: argparse.Namespace, cache: dict) -> dict:
    """Greedy on ``a.n`` held-out items (the first ``a.screen_n`` the screening's completions where
    this run screened it), with ``const`` (:func:`prepare_confirm`) and every item's gold answer,
    extracted answer and score."""
    size, held_out, rows, first = cache.pop(id(c))
    items = held_out[:a.n]
    rest = greedy(model, tokenizer, c["task"], c["options"], rows[len(first["raw"]):a.n], a)
    out = {k: first[k] + rest[k] for k in first}
    s = summary(out)
    return {**c, "size": size, **s, "accuracy": s["solved"] / s["n"], "interval": wilson(s["solved"], s["n"]),
            "best_constant": const, "first_completion": out["completions"][0],
            "items": [{"i": i, "gold": str(it["answer"]), "answer": extract_tagged_answer(text),
                       "score": 1.0 if raw >= 1.0 else 0.0}
                      for i, (it, text, raw) in enumerate(zip(items, out["completions"], out["raw"]))]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    ap.add_argument("--tasks", nargs="+", default=None, help="only these tasks (default: every reasoning-gym task)")
    ap.add_argument("--screen_n", type=int, default=16, help="held-out items per candidate in screening")
    ap.add_argument("--n", type=int, default=64, help="held-out items per candidate in confirmation")
    ap.add_argument("--confirm_min", type=int, default=1, help="screening items solved to be confirmed")
    ap.add_argument("--confirm_budget_s", type=float, default=None,
                    help="after this many seconds of confirmation, confirm only candidates solving 5-60%% in screening")
    ap.add_argument("--max_new_tokens", type=int, default=64)
    ap.add_argument("--batch_size", type=int, default=16)
    ap.add_argument("--shots", type=int, default=DEFAULT_SHOTS)
    ap.add_argument("--seed", type=int, default=0, help="the training items' generator seed (held out: seed + 1,000,003)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 200],
                    help="training items, tried in turn until the held-out ones have enough distinct questions")
    ap.add_argument("--gen_timeout", type=int, default=60, help="seconds to generate one candidate's items at one size")
    ap.add_argument("--const_timeout", type=float, default=30.0, help="seconds for the best constant answer's search")
    ap.add_argument("--max_prompt_tokens", type=int, default=1024,
                    help="skip a candidate whose prompts are longer (CPU time grows with them)")
    ap.add_argument("--screen_all", action="store_true",
                    help="screen a task's harder setting even where its easiest one solved none")
    ap.add_argument("--screen_only", action="store_true")
    ap.add_argument("--screen_from", type=Path, default=None,
                    help="skip screening: confirm the candidates of this result file's screening pass")
    ap.add_argument("--const_max", type=float, default=0.25,
                    help="promising: solved 5-60%% in screening and no constant answer scoring over this")
    ap.add_argument("--items_only", action="store_true", help="only list the candidates and generate their items (no model)")
    ap.add_argument("--torch_threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=record.default_out("reasoning_gym_base"))
    a = ap.parse_args()
    torch.set_num_threads(a.torch_threads)
    cands, skipped = candidates(a.tasks)
    if a.items_only:
        for c in cands:
            start = time.perf_counter()
            try:
                size, _, held_out, notes = items_of(c["task"], c["options"], a)
                print(json.dumps({**c, "size": size, "notes": notes, "seconds": round(time.perf_counter() - start, 1),
                                  "distinct_gold": len({str(it["answer"]) for it in held_out[:a.n]}),
                                  "question_chars": max(len(it["question"]) for it in held_out)}), flush=True)
            except Skip as e:
                print(json.dumps({**c, "skipped": str(e), "seconds": round(time.perf_counter() - start, 1)}), flush=True)
        return
    from grpo_seq.io.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(a.model)
    result: dict = {"meta": record.meta(), "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
                    "candidates": len(cands) + len(skipped), "screen": [], "rows": [], "skipped": list(skipped)}

    def save() -> None:
        record.prepare(a.out).write_text(json.dumps(result, indent=2))

    def skip(c: dict, stage: str, why: str) -> None:
        result["skipped"].append({**c, "stage": stage, "skipped": why})
        print(json.dumps({"skipped": c["task"], "options": c["options"], "stage": stage, "why": why}), flush=True)

    cache: dict = {}
    t0 = time.perf_counter()
    screened = []
    if a.screen_from:  # a finished screening pass: confirm its candidates
        old = json.loads(Path(a.screen_from).read_text())
        by_key = {(c["task"], json.dumps(c["options"], sort_keys=True)): c for c in cands}
        for row in old["screen"]:
            c = by_key.get((row["task"], json.dumps(row["options"], sort_keys=True)))
            if c is None:  # not among --tasks
                continue
            result["screen"].append(row)
            screened.append((c, row))
        result["skipped"] = [s for s in old["skipped"] if s.get("stage", "screen") == "screen"
                             and (a.tasks is None or s["task"] in a.tasks)]
        result["screen_seconds"] = old.get("screen_seconds")
        result["screen_from"] = {"path": str(a.screen_from), "meta": old["meta"]}
        cands = []
    easiest_solved: dict[str, int] = {}  # per task: what its easiest setting solved in screening
    for i, c in enumerate(cands):
        if (c["level"].startswith("harder") and not a.screen_all
                and easiest_solved.get(c["task"], a.confirm_min) < a.confirm_min):
            skip(c, "screen", f"not screened: the task's easiest setting solved {easiest_solved[c['task']]} of "
                              f"{a.screen_n} (--screen_all screens it anyway)")
            save()
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                row = screen_one(model, tokenizer, c, a, cache)
        except Skip as e:
            skip(c, "screen", str(e))
        else:
            result["screen"].append(row)
            screened.append((c, row))
            if c["level"].startswith("easiest"):
                easiest_solved[c["task"]] = row["solved"]
            if row["solved"] < a.confirm_min and "current" not in c["level"]:
                cache.pop(id(c), None)  # not confirmed: its items are not needed again
            print(f"[screen {i + 1}/{len(cands)} {time.perf_counter() - t0:.0f}s] " + json.dumps(row), flush=True)
        save()
    if not a.screen_from:
        result["screen_seconds"] = round(time.perf_counter() - t0, 1)
    if a.screen_only:
        return save()

    chosen = [(c, r) for c, r in screened if "current" in c["level"] or r["solved"] >= a.confirm_min]
    t1 = time.perf_counter()
    consts: dict[int, dict] = {}
    for c, r in list(chosen):  # the best constant answer first (no model): it orders the confirmation
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                consts[id(c)] = prepare_confirm(tokenizer, c, a, cache)
        except Skip as e:
            skip(c, "confirm", str(e))
            chosen.remove((c, r))

    def promising(c: dict, r: dict) -> bool:
        """Solved 5-60% in screening, and no constant answer scores over ``a.const_max``."""
        return 0.05 <= r["solved"] / r["n"] <= 0.6 and consts[id(c)]["accuracy"] <= a.const_max

    # the recipe's current tasks first, then the promising ones: a time budget cuts the rest
    chosen.sort(key=lambda cr: (0 if "current" in cr[0]["level"] else 1 if promising(*cr) else 2, -cr[1]["solved"]))
    for j, (c, r) in enumerate(chosen):
        over = a.confirm_budget_s is not None and time.perf_counter() - t1 > a.confirm_budget_s
        const = consts[id(c)]
        if over and "current" not in c["level"] and not promising(c, r):
            skip(c, "confirm", f"not confirmed (past --confirm_budget_s {a.confirm_budget_s}): solved {r['solved']}/"
                               f"{r['n']} in screening; the best constant answer {const['answer'][:40]!r} scores "
                               f"{const['solved']}/{a.n} (over --const_max {a.const_max} or screening outside 5-60%)")
            result["skipped"][-1]["best_constant"] = const
            cache.pop(id(c), None)
            save()
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                row = confirm_one(model, tokenizer, c, const, a, cache)
        except Skip as e:
            skip(c, "confirm", str(e))
        else:
            result["rows"].append(row)
            print(f"[confirm {j + 1}/{len(chosen)} {time.perf_counter() - t1:.0f}s] "
                  + json.dumps({k: v for k, v in row.items() if k not in ("items", "first_completion")}), flush=True)
        save()
    result["confirm_seconds"] = round(time.perf_counter() - t1, 1)
    save()


if __name__ == "__main__":
    main()
