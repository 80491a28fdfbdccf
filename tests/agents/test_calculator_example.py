"""The example agent (examples/agent/calculator_agent.py), written against the openai package alone,
trained by import path: its calculator, and its two calls with the calculator's result masked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_lm import save_tiny_lm

from grpo_seq.cli.commands import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent"


@pytest.fixture
def calculator_agent(example_agent):
    return example_agent("calculator_agent")


def test_the_calculator_evaluates_arithmetic_and_nothing_else(calculator_agent):
    calculate = calculator_agent.calculate
    assert calculate("12 * 7") == "84" and calculate("(50 - 17) / 3") == "11" and calculate("-2 + 0.5") == "-1.5"
    for bad in ("__import__('os').system('true')", "x + 1", "2 ** 1000000", "1 / 0", "12 *"):
        assert calculate(bad).startswith("error:"), bad


def test_the_example_trains_with_both_calls_and_the_calculator_result_masked(calculator_agent, tmp_path):
    save_tiny_lm(tmp_path / "tiny")
    out = tmp_path / "run"
    main(["train-agent", "--model", str(tmp_path / "tiny"), "--rollout", "calculator_agent:rollout",
          "--dataset", str(EXAMPLE / "train.jsonl"), "--max_steps", "1", "--num_groups", "1", "--num_generations", "2",
          "--max_completion_length", "6", "--max_total_tokens", "600", "--log_completions_every", "1",
          "--torch_threads", "1", "--output_dir", str(out)])
    for line in (out / "completions" / "step_0001.jsonl").read_text().splitlines():
        conversation = json.loads(line)["conversation"]
        # a tiny random model calls no tool: the calculator's result comes back as a user turn, never trained
        assert [(m["role"], m["trained"]) for m in conversation] == [("assistant", True), ("user", False),
                                                                      ("assistant", True)]
        assert conversation[1]["content"].startswith("The calculator says: ")
    step = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert step["agent/calls"] == 2 and step["agent/tool_called"] == 0
