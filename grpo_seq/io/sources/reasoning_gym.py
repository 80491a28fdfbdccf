"""reasoning-gym tasks as a prompt source: ``--dataset reasoning_gym:TASK`` (the optional extra
``reasoning``: ``pip install -e ".[reasoning]"``).

reasoning-gym generates the items of 100+ procedural reasoning tasks (arithmetic, counting,
sorting, puzzles) from a seed, and scores an answer with each task's own ``score_answer``. A
task's options (its difficulty: ``min_terms``, ``max_digits``, ...) and reasoning-gym's own
``seed`` and ``size`` (and ``shots``, below) come as one JSON object,
``--dataset_config '{"max_terms": 3}'``; unknown names are refused, listing the task's options.

Train and held-out items never meet: the ``train`` split draws ``size`` items from the generator
seed ``S`` (``seed``, default :data:`DEFAULT_SEED`); any other split (``test``) draws from
``S + HELD_OUT_OFFSET`` and drops every item whose question is also among the training items
(small tasks repeat questions across seeds), so an evaluation never sees a question trained on.

A ``stages`` key (a list of option objects, easiest first) makes a curriculum: the training rows
are each stage's ``size`` items then the options' own, each row with its ``stage`` (0 the first);
the held-out items are the options' own, none a question of any stage
(:mod:`grpo_seq.sampling.curriculum` draws them).

Each row holds a chat ``prompt`` (``shots`` worked examples from the training items, default 1,
then the question, each followed by :data:`ANSWER_INSTRUCTION`: reasoning-gym's scorers read the
answer between ``<answer>`` tags; :func:`task_rows`), and the item's ``question``, ``answer`` and
``metadata``, which reach the reward functions as columns (``reward_fns.reasoning_gym:score``
hands them to the task's ``score_answer``). The held-out rows' examples are training items too,
never held-out ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any

from ...errors import UsageError
from ..rows import Rows

__all__ = ["SCHEME", "DEFAULT_SEED", "DEFAULT_SIZE", "DEFAULT_SHOTS", "HELD_OUT_OFFSET", "ANSWER_INSTRUCTION",
           "TRAIN_SPLIT", "task_names", "make_dataset", "task_items", "task_rows", "parse_options", "reasoning_gym_rows"]

SCHEME = "reasoning_gym:"
DEFAULT_SEED = 0  # reasoning-gym's own default is a random seed: runs would not repeat
DEFAULT_SIZE = 1000  # training items; a run of 30 steps x 2 prompts visits 60 of them
HELD_OUT_OFFSET = 1_000_003  # held-out items come from seed + this (a prime, far from any seed a user picks)
TRAIN_SPLIT = "train"
ANSWER_INSTRUCTION = "Give only the final answer between <answer> and </answer> tags."
DEFAULT_SHOTS = 1  # worked examples before each question (task_rows says why)


def _reasoning_gym() -> Any:
    try:
        import reasoning_gym
    except ImportError:
        raise UsageError("reasoning-gym tasks need the package reasoning-gym: pip install -e \".[reasoning]\" "
                         "(or pip install reasoning-gym)") from None
    return reasoning_gym


def task_names() -> list[str]:
    """Every task reasoning-gym registers, sorted."""
    _reasoning_gym()
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def _unknown_task(task: str, flag: str) -> UsageError:
    names = task_names()
    close = difflib.get_close_matches(task, names, n=3, cutoff=0.5)
    some = [n for n in ("basic_arithmetic", "chain_sum", "leg_counting", "letter_counting", "spell_backward",
                        "word_sorting") if n in names and n not in close]
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return UsageError(f"{flag}: no reasoning-gym task {task!r}{hint}; tasks include {', '.join(some[:4])} "
                      f"({len(names)} in all: python -c \"from reasoning_gym.factory import DATASETS; print(sorted(DATASETS))\")")


def make_dataset(task: str, options: dict[str, Any] | None = None, seed: int = DEFAULT_SEED,
                 size: int = DEFAULT_SIZE, flag: str = "--task", options_flag: str = "--task_options") -> Any:
    """reasoning-gym's dataset of ``task`` with ``options`` (its config's fields), ``seed`` and
    ``size``. An unknown task is a :class:`UsageError` naming ``flag``; an unknown option or a
    value the task's config refuses, one naming ``options_flag`` (the options the user gave them with)."""
    _reasoning_gym()
    from reasoning_gym.factory import DATASETS

    if task not in DATASETS:
        raise _unknown_task(task, flag)
    dataset_cls, config_cls = DATASETS[task]
    fields = sorted(f.name for f in dataclasses.fields(config_cls) if f.name not in ("seed", "size"))
    unknown = sorted(set(options or {}) - set(fields))
    if unknown:
        raise UsageError(f"{options_flag}: reasoning-gym task {task} has no option(s) {', '.join(unknown)}; its "
                         f"options: {', '.join(fields) or 'none'}")
    try:
        config = config_cls(**{**(options or {}), "seed": seed, "size": size})
        if hasattr(config, "validate"):
            config.validate()
        return dataset_cls(config=config)
    except (AssertionError, ValueError, TypeError) as e:
        raise UsageError(f"{options_flag}: reasoning-gym task {task} refuses {json.dumps(options or {})}: "
                         f"{' '.join(str(e).split()) or type(e).__name__}") from None


def _items(dataset: Any, count: int, skip: set[str] | frozenset[str] = frozenset(),
           distinct: bool = False, where: str = "--task_options") -> list[dict[str, Any]]:
    """The first ``count`` items of ``dataset`` whose question is not in ``skip`` (nor, ``distinct``,
    an earlier item's); ``where`` names the options in an error."""
    out, i, skip = [], 0, set(skip)
    while len(out) < count and i < len(dataset):
        item = _generate(dataset, i, where)
        i += 1
        if item["question"] not in skip:
            out.append({"question": item["question"], "answer": item["answer"], "metadata": item["metadata"]})
            if distinct:
                skip.add(item["question"])
    return out


def _generate(dataset: Any, i: int, where: str) -> dict[str, Any]:
    """Item ``i``; a generator that fails on its options (some accept a setting in their config
    and then find no problem to generate) is the options' fault: a :class:`UsageError`."""
    try:
        return dataset[i]
    except (IndexError, ValueError, AssertionError, KeyError) as e:
        config = {k: v for k, v in vars(dataset.config).items() if k not in ("seed", "size")}
        raise UsageError(f"{where} generates no item with {json.dumps(config, default=str):.200} "
                         f"({type(e).__name__}: {e}); try its defaults") from None


def task_items(task: str, options: dict[str, Any] | None = None, split: str = TRAIN_SPLIT, seed: int = DEFAULT_SEED,
               size: int = DEFAULT_SIZE, flag: str = "--task", options_flag: str = "--task_options",
               count: int | None = None) -> list[dict[str, Any]]:
    """Items (``question``, ``answer``, ``metadata``) of ``task``: for the ``train`` split the
    ``size`` items of seed ``seed``; else held-out items, from seed ``seed + HELD_OUT_OFFSET``,
    no question twice and none a question of the ``size`` training items: ``count`` of them
    (fewer means the task has too few distinct questions: a :class:`UsageError`), or, without
    ``count``, up to ``size`` (as many as the task has; none at all is the error). Errors name
    ``flag`` (the task) or ``options_flag`` (its options, seed and size)."""
    for name, value, least in (("seed", seed, 0), ("size", size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UsageError(f"{options_flag}: {name} must be an int >= {least}, got {value!r}")
    where = f"{options_flag}: reasoning-gym task {task}"
    train = _items(make_dataset(task, options, seed, size, flag, options_flag), size, where=where)
    if split == TRAIN_SPLIT:
        return train
    seen = {item["question"] for item in train}
    wanted = size if count is None else count
    # room for the questions dropped as seen in training or drawn twice
    held_out = _items(make_dataset(task, options, seed + HELD_OUT_OFFSET, 2 * wanted + 100, flag, options_flag),
                      wanted, seen, distinct=True, where=where)
    if len(held_out) < (wanted if count is not None else 1):
        raise UsageError(f"{options_flag}: reasoning-gym task {task} has only {len(held_out)} of {count} held-out "
                         f"questions that differ from its {size} training ones; ask for fewer training items or "
                         "a harder setting")
    return held_out


def _examples(pool: list[dict[str, Any]], i: int, question: str, shots: int) -> list[dict[str, Any]]:
    """``shots`` items of ``pool`` after position ``i`` (cyclically) whose question differs from ``question``."""
    out: list[dict[str, Any]] = []
    for k in range(1, len(pool) + 1):
        if len(out) == shots:
            break
        item = pool[(i + k) % len(pool)]
        if item["question"] != question:
            out.append(item)
    return out


def task_rows(items: list[dict[str, Any]], pool: list[dict[str, Any]] | None = None, shots: int = DEFAULT_SHOTS,
              instruction: str = ANSWER_INSTRUCTION, source: str = "reasoning_gym") -> Rows:
    """Rows for the sampler: a chat ``prompt`` and the item's ``question``, ``answer`` and
    ``metadata`` for the reward functions.

    The prompt is ``shots`` worked examples from ``pool`` (the training items; default ``items``)
    as earlier turns, each a user question and the assistant's ``<answer>...</answer>``, then the
    question; every question is followed by ``instruction``. Each row gets other examples (the
    next ones in the pool, never its own question), so copying an example's answer is not a
    strategy. Why examples at all: a small chat model (135M parameters) given the instruction
    alone did not write the tags, and a reward that is always 0 teaches nothing; after one worked
    example it did on most items (docs/guides/reasoning-tasks.md has the measurement)."""
    pool = items if pool is None else pool

    def turn(question: str) -> dict[str, str]:
        return {"role": "user", "content": f"{question.rstrip()}\n{instruction}" if instruction else question}

    rows = []
    for i, it in enumerate(items):
        shown = _examples(pool, i, it["question"], shots) if shots else []
        prompt = [m for ex in shown for m in (turn(ex["question"]), {"role": "assistant",
                                                                       "content": f"<answer>{ex['answer']}</answer>"})]
        rows.append({"prompt": [*prompt, turn(it["question"])], **it})
    return Rows(rows, [f"{source} item {i + 1}" for i in range(len(rows))])


def parse_options(text: str | dict | None, flag: str) -> dict[str, Any]:
    """A task's options: a JSON object (``{"max_terms": 3}``), a dict, or nothing."""
    if text is None or text == "":
        return {}
    if isinstance(text, dict):
        return dict(text)
    try:
        options = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{flag}: not valid JSON ({e.msg}, column {e.colno}): {text!r:.120}; give the task's options "
                         "as a JSON object, e.g. '{\"max_terms\": 3}'") from None
    if not isinstance(options, dict):
        raise UsageError(f"{flag}: the task's options must be a JSON object, e.g. '{{\"max_terms\": 3}}', got {text!r:.120}")
    return options


def reasoning_gym_rows(dataset: str, split: str = TRAIN_SPLIT, config: str | None = None) -> Rows:
    """The rows of ``--dataset reasoning_gym:TASK`` for split ``split`` (``train``, or any other:
    held out). ``config``: the JSON of the task's options, with reasoning-gym's ``seed`` and
    ``size`` and this source's ``shots`` (:func:`grpo_seq.io.prompt_data.read_rows` comes here)."""
    task = dataset[len(SCHEME):].strip()
    flag = f"--dataset {dataset}"
    if not task:
        raise UsageError(f"{flag}: name a task, e.g. --dataset {SCHEME}basic_arithmetic")
    options = parse_options(config, "--dataset_config")
    seed, size = options.pop("seed", DEFAULT_SEED), options.pop("size", DEFAULT_SIZE)
    shots = options.pop("shots", DEFAULT_SHOTS)
    if isinstance(shots, bool) or not isinstance(shots, int) or shots < 0:
        raise UsageError(f"--dataset_config: shots must be an int >= 0, got {shots!r}")
    stages = _stages(options.pop("stages", []))
    train = task_items(task, options, TRAIN_SPLIT, seed, size, flag, "--dataset_config")
    easier = [task_items(task, o, TRAIN_SPLIT, seed, size, flag, "--dataset_config") for o in stages]
    if split != TRAIN_SPLIT:  # held out: the options' own items, none a question of any stage's
        seen = {it["question"] for items in easier for it in items}
        held_out = [it for it in task_items(task, options, split, seed, size, flag, "--dataset_config")
                    if it["question"] not in seen]
        return task_rows(held_out, train, shots, source=f"{flag} ({split})")
    if not stages:
        return task_rows(train, train, shots, source=f"{flag} ({split})")
    parts = [task_rows(items, items, shots, source=f"{flag} ({split}, stage {k})")
             for k, items in enumerate([*easier, train])]
    return Rows([{**row, "stage": k} for k, part in enumerate(parts) for row in part],
                [place for part in parts for place in part.places])


def _stages(stages: Any) -> list[dict[str, Any]]:
    """``stages``: the options of easier stages before the options themselves (a curriculum:
    rows get a ``stage``, 0 the first of these, the options' own items the last)."""
    if not isinstance(stages, list) or not all(isinstance(o, dict) for o in stages):
        raise UsageError(f"--dataset_config: stages must be a list of the task's options (JSON objects), easiest "
                         f"first, got {json.dumps(stages):.120}")
    for o in stages:
        if set(o) & {"seed", "size", "shots", "stages"}:
            raise UsageError("--dataset_config: a stage gives the task's options only; seed, size and shots are "
                             "the whole dataset's")
    return stages
