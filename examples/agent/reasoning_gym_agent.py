"""An agent that answers reasoning-gym items through the ``openai`` package: nothing here knows grpo-seq.

One call per item: the item's chat ``prompt`` (a worked example, then the question, each asking
for the answer between ``<answer>`` tags) goes to the model, and the reply is scored by the task's
own ``score_answer`` (1 for full marks, else 0), the task named by the item's
``metadata["source_dataset"]``. Items of ``--dataset reasoning_gym:TASK`` carry all three, so
the agent trains on any task, and its held-out scores sit beside the language-model recipe's on
the same items (``benchmarks/lm_learning.py --program agent``):

    grpo-seq train-agent --model HuggingFaceTB/SmolLM2-135M-Instruct \\
        --rollout examples.agent.reasoning_gym_agent:rollout \\
        --dataset reasoning_gym:knights_knaves --eval_dataset reasoning_gym:knights_knaves \\
        --eval_dataset_split test --eval_size 64
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def _score_answer(task: str):
    import reasoning_gym

    return reasoning_gym.create_dataset(task, size=1, seed=0).score_answer


async def rollout(client, item: dict) -> dict:
    """The model's answer to ``item``; the reward is 1.0 when the task scores it in full."""
    from reasoning_gym.utils import extract_answer

    model = (await client.models.list()).data[0].id
    reply = (await client.chat.completions.create(model=model, messages=item["prompt"])).choices[0].message
    answer = extract_answer(reply.content or "")
    entry = {"question": item.get("question", ""), "answer": item["answer"], "metadata": item["metadata"]}
    try:
        score = float(_score_answer(item["metadata"]["source_dataset"])(answer, entry))
    except Exception:  # noqa: BLE001 - a scorer that cannot read what the model wrote: a wrong answer
        score = 0.0
    return {"reward": float(score == 1.0), "metrics": {"tagged": float(answer is not None)}}
