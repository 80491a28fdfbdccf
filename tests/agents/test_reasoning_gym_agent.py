"""The reasoning-gym example agent (examples/agent/reasoning_gym_agent.py): one call with the item's
own prompt, scored by the task's score_answer, full marks only."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("reasoning_gym")

from grpo_seq.io.prompt_data import read_rows  # noqa: E402

class Client:
    """An ``openai.AsyncOpenAI`` stand-in that replies ``reply`` and keeps the messages it was sent."""

    def __init__(self, reply: str | None):
        self.sent: list = []

        async def models_list():
            return SimpleNamespace(data=[SimpleNamespace(id="policy")])

        async def create(model, messages, **kwargs):
            self.sent.append(messages)
            return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=reply))])

        self.models = SimpleNamespace(list=models_list)
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=create))


@pytest.fixture
def agent(example_agent):
    return example_agent("reasoning_gym_agent")


def test_the_agent_sends_the_items_prompt_and_scores_full_marks_only(agent):
    item = dict(read_rows("reasoning_gym:basic_arithmetic", "train",
                          json.dumps({"max_terms": 2, "max_digits": 1, "seed": 3, "size": 4}))[0])
    right = f"<answer>{item['answer']}</answer>"
    for reply, reward, tagged in ((right, 1.0, 1.0), (f"<answer>{int(item['answer']) + 1}</answer>", 0.0, 1.0),
                                  (item["answer"], 0.0, 0.0), (None, 0.0, 0.0)):
        client = Client(reply)
        result = asyncio.run(agent.rollout(client, item))
        assert result == {"reward": reward, "metrics": {"tagged": tagged}}, reply
        assert client.sent == [item["prompt"]]  # the worked example and the question, as the LM recipe prompts
