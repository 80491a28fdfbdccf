"""reasoning-gym's own scorers as reward functions (the optional extra ``reasoning``).

Every reasoning-gym task scores an answer with its ``score_answer(answer, entry)``: 1.0 for a
right answer, 0.0 for a wrong or missing one, partial credit where the task defines it. Using it
as the reward means the run optimises exactly what the task's authors measure. The answer is
what the model wrote between the last ``<answer>`` and ``</answer>`` tags (reasoning-gym's
``extract_answer``; the source's prompts ask for them); none: 0.0.

- :func:`score`: for rows of ``--dataset reasoning_gym:TASK`` (any task: each row's
  ``metadata["source_dataset"]`` names the scorer), ``--reward_funcs reward_fns.reasoning_gym:score``;
- :func:`task_score`: a factory, the reward function of one task built with its options, as
  recipes/reasoning_gym.py uses it (a scorer that reads its config scores as that config says).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Sequence

from ._text import completion_text

__all__ = ["score", "task_score", "extract_tagged_answer"]


def extract_tagged_answer(text: str) -> str | None:
    """The text between the last ``<answer>`` and ``</answer>`` tags, stripped (reasoning-gym's own
    reading), or None without them."""
    from reasoning_gym.utils import extract_answer

    return extract_answer(text)


def _score_one(scorer: Callable[..., float], text: str, entry: dict[str, Any], name: str) -> float:
    """``scorer`` on one completion. A scorer that raises on what a model wrote (reasoning-gym
    parses answers with ast, sympy, regexes) scores it 0.0 with a warning rather than ending the
    run: a malformed answer is a wrong answer."""
    try:
        return float(scorer(extract_tagged_answer(text), entry))
    except Exception as e:  # noqa: BLE001 - any scorer failure on model text
        warnings.warn(f"reasoning-gym task {name}: its score_answer raised {type(e).__name__}: {e}; scored 0.0",
                      RuntimeWarning, stacklevel=2)
        return 0.0


def _entries(completions: Sequence[Any], question: Sequence[Any] | None, answer: Sequence[Any] | None,
             metadata: Sequence[Any] | None) -> list[dict[str, Any]]:
    """The items the scorers read, rebuilt from the dataset's columns."""
    if answer is None or metadata is None:
        raise ValueError("reasoning-gym scoring needs the columns 'answer' and 'metadata' (rows of --dataset "
                         "reasoning_gym:TASK have them)")
    if not len(answer) == len(metadata) == len(completions):
        raise ValueError(f"got {len(answer)} answers and {len(metadata)} metadata for {len(completions)} completions")
    questions = question if question is not None else [""] * len(completions)
    return [{"question": q, "answer": a, "metadata": m} for q, a, m in zip(questions, answer, metadata)]


@functools.lru_cache(maxsize=None)
def _scorer_of(task: str) -> Callable[..., float]:
    from grpo_seq.io.sources.reasoning_gym import make_dataset

    return make_dataset(task, size=1).score_answer


def _check_row(row: dict[str, Any]) -> None:
    """Refuse a row no scorer can read, before the first step (``grpo_seq.scoring.rewards.check_rows``)."""
    meta = row.get("metadata")
    if row.get("answer") is None or not isinstance(meta, dict) or not isinstance(meta.get("source_dataset"), str):
        raise ValueError("needs an 'answer' and a 'metadata' naming its 'source_dataset' (a reasoning-gym item)")


def score(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), question: Sequence[Any] | None = None,
          answer: Sequence[Any] | None = None, metadata: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
    """Each completion scored by the ``score_answer`` of its row's task (``metadata["source_dataset"]``,
    built with the task's default options)."""
    entries = _entries(completions, question, answer, metadata)
    return [_score_one(_scorer_of(e["metadata"]["source_dataset"]), completion_text(c), e, e["metadata"]["source_dataset"])
            for c, e in zip(completions, entries)]


score.check_row = _check_row  # type: ignore[attr-defined]


def task_score(task: str, options: dict[str, Any] | None = None, partial_credit: bool = True) -> Callable[..., list[float]]:
    """The reward function of reasoning-gym task ``task`` built with ``options``: its
    ``score_answer`` on each completion's tagged answer. Named after the task (its metric is
    ``reward/<task>``). An unknown task or option is a ``UsageError`` naming it.

    ``partial_credit=False`` keeps only full marks (1.0 for an answer the task scores 1.0, else
    0.0). Many tasks' default partial credit is ``len(gold) / len(answer)`` for an answer that
    merely contains the gold one, which a policy can exploit: trained on letter counting with it,
    the model learned to answer "10.5" (credit for 0, 1 and 5) within a few steps."""
    from grpo_seq.io.sources.reasoning_gym import make_dataset

    scorer = make_dataset(task, options, size=1).score_answer

    def task_reward(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                    question: Sequence[Any] | None = None, answer: Sequence[Any] | None = None,
                    metadata: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        entries = _entries(completions, question, answer, metadata)
        scores = [_score_one(scorer, completion_text(c), e, task) for c, e in zip(completions, entries)]
        return scores if partial_credit else [1.0 if s >= 1.0 else 0.0 for s in scores]

    task_reward.__name__ = task_reward.__qualname__ = task
    task_reward.__doc__ = f"reasoning-gym's score_answer of task {task} on the answer between <answer> tags."
    task_reward.check_row = _check_row  # type: ignore[attr-defined]
    return task_reward
