"""GSM8K with a calculator as a text environment (text_envs/gsm8k_calculator.py)."""

from __future__ import annotations

import json

import pytest

from grpo_seq.envs.text import make_text_env
from text_envs.gsm8k_calculator import calculate

ENV_ID = "text_envs.gsm8k_calculator:GSM8KCalculator-v0"
DUCKS = {"question": "Janet's ducks lay 16 eggs per day. She eats 3 and bakes with 4. She sells the rest at $2 "
                     "each. How much does she make?",
         "answer": "16 - 3 - 4 = <<16-3-4=9>>9 eggs.\n9 * 2 = <<9*2=18>>18\n#### 18"}


@pytest.mark.parametrize("expression, value", [
    ("16-3-4", "9"), ("9 * 2", "18"), ("48 / 2 + 7", "31"), ("1/3", "0.333333"), ("2**10", "1024"),
    ("3 x 4", "12"), ("1,200 / 4", "300"), ("-(2.5 * 2)", "-5"),
])
def test_calculate(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize("expression, why", [
    ("__import__('os')", "is not arithmetic"), ("1/0", "division by zero"), ("10 ** 1000", "only whole powers"),
    ("2 +", "is not arithmetic"),
])
def test_calculate_refuses(expression, why):
    with pytest.raises(ValueError, match=why):
        calculate(expression)


@pytest.fixture
def env(tmp_path):
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps(DUCKS) + "\n")
    return make_text_env(ENV_ID, data=str(data), max_calls=2)


def test_a_calculation_then_the_right_answer(env):
    prompt, _ = env.reset(seed=0)
    assert prompt.startswith("Janet's ducks") and "<calc>" in prompt
    assert env.step("First <calc>16 - 3 - 4</calc>")[:3] == ("16 - 3 - 4 = 9", 0.0, False)
    assert env.step("So what?")[0].startswith("Write a calculation as <calc>")
    obs, reward, terminated, truncated, info = env.step("9 * 2 = 18\n#### 18")
    assert (reward, terminated, truncated, info["success"], info["calls"]) == (1.0, True, False, True, 1)


def test_a_wrong_answer_and_too_many_calls(env):
    env.reset(seed=0)
    assert env.step("#### 17")[1:4] == (0.0, True, False)
    env.reset(seed=0)
    assert env.step("<calc>import os</calc>")[0].startswith("The calculator cannot compute that")
    env.step("<calc>1+1</calc>")
    assert env.step("<calc>2+2</calc>")[1:4] == (0.0, False, True)  # the third call: truncated


def test_without_the_calculator_the_first_reply_is_scored(tmp_path):
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps(DUCKS) + "\n")
    env = make_text_env(ENV_ID, data=str(data), calculator=False)
    prompt, _ = env.reset(seed=0)
    assert "<calc>" not in prompt and prompt.endswith("'#### <number>'.")
    # a tool call is no answer: the episode ends there, unpaid
    assert env.step("<calc>16 - 3 - 4</calc>")[1:4] == (0.0, True, False)
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step("16 - 3 - 4 = 9, 9 * 2 = 18\n#### 18")
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_in_order_plays_row_seed_mod_rows(tmp_path):
    rows = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(3)]
    data = tmp_path / "three.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = make_text_env(ENV_ID, data=str(data), in_order=True)
    assert [env.reset(seed=s)[0].split("\n")[0] for s in (0, 1, 2, 3, 5)] == ["q0", "q1", "q2", "q0", "q2"]
