"""GSM8K with a calculator, as a text environment: the model may ask for a calculation, the
environment answers with its result, and the final answer is scored as the GSM8K recipe scores it.

    grpo-seq train-text-env --model MODEL --env_id text_envs.gsm8k_calculator:GSM8KCalculator-v0 \\
        --env_kwargs '{"data": "../shared/data/gsm8k/train.jsonl"}'

The tool call: a reply that holds ``<calc>EXPRESSION</calc>`` (numbers, + - * / ** %, parentheses)
and no final answer line is answered ``EXPRESSION = RESULT`` (the first call of the reply; an
expression that is not arithmetic is answered with why). The final answer: a reply with a
``#### <number>`` line (or a ``\\boxed{}``) ends the episode, with the reward of
:func:`reward_fns.gsm8k.correctness_reward` (1 right, 0 wrong) and ``info["success"]``. Anything
else is answered with a reminder of both forms. More than ``max_calls`` calculations end the
episode, truncated, with reward 0.

Each reset draws a problem with the env's seeded generator, so a group's episodes share it;
``in_order=True`` plays row ``seed mod len(rows)`` instead, so that seeds 0 to N-1 are the
first N problems (held-out figures on a fixed dev set). ``calculator=False`` is the same
problems and scoring without the tool, for comparing against the same budget: the prompt asks
for the answer line only and the first reply ends the episode, scored.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import gymnasium as gym

from reward_fns.gsm8k import GSM8K_INSTRUCTION, correctness_reward, extract_answer

__all__ = ["GSM8KCalculator", "calculate", "CALCULATOR_INSTRUCTION"]

CALCULATOR_INSTRUCTION = ("You may use a calculator: write <calc>EXPRESSION</calc> (for example <calc>48 / 2 + 7</calc>) "
                          "and stop; the result comes back. " + GSM8K_INSTRUCTION)
_CALL = re.compile(r"<calc>(.*?)</calc>", re.S)
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Pow: operator.pow, ast.Mod: operator.mod, ast.USub: operator.neg, ast.UAdd: operator.pos}
_MAX_EXPONENT = 100  # 10 ** 10 ** 10 would run for ever


def _value(node: ast.AST) -> Fraction:
    """An arithmetic expression's exact value: numbers and the operators of ``_OPS`` only."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and (right.denominator != 1 or abs(right) > _MAX_EXPONENT):
            raise ValueError("only whole powers up to 100")
        return _OPS[type(node.op)](left, right)
    raise ValueError(f"{ast.unparse(node)!r} is not arithmetic")


def calculate(expression: str) -> str:
    """The value of an arithmetic ``expression`` as text (``"7"``, ``"2.5"``, ``"0.333333"``);
    ``ValueError`` saying why for anything else (names, calls, division by zero)."""
    text = expression.replace(",", "").replace("x", "*").replace("×", "*").strip()
    try:
        value = _value(ast.parse(text, mode="eval").body)
    except SyntaxError:
        raise ValueError(f"{expression.strip()!r} is not arithmetic") from None
    except ZeroDivisionError:
        raise ValueError("division by zero") from None
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6f}".rstrip("0")


class GSM8KCalculator(gym.Env):
    """GSM8K problems from ``data`` (JSON lines with ``question`` and ``answer``), a calculator,
    and the GSM8K correctness reward on the final answer."""

    def __init__(self, data: str = "../shared/data/gsm8k/train.jsonl", max_calls: int = 4, calculator: bool = True,
                 in_order: bool = False):
        path = Path(data).expanduser()
        if not path.is_file():
            raise ValueError(f"GSM8KCalculator: no problems at {path} (give data=<a .jsonl file of question/answer rows>)")
        self.rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        self.max_calls, self.calculator, self.in_order = max_calls, calculator, in_order
        self.observation_space = self.action_space = gym.spaces.Text(max_length=100_000)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        index = (seed or 0) % len(self.rows) if self.in_order else int(self.np_random.integers(len(self.rows)))
        self.row, self.calls = self.rows[index], 0
        return f"{self.row['question']}\n{CALCULATOR_INSTRUCTION if self.calculator else GSM8K_INSTRUCTION}", {}

    def step(self, reply: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if extract_answer(reply) is not None or not self.calculator:
            reward = correctness_reward(None, [reply], answer=[self.row["answer"]])[0]
            return "", reward, True, False, {"success": reward == 1.0, "calls": self.calls}
        call = _CALL.search(reply)
        if call is None:
            return "Write a calculation as <calc>EXPRESSION</calc>, or the final answer as '#### <number>'.", \
                0.0, False, False, {}
        self.calls += 1
        if self.calls > self.max_calls:
            return "", 0.0, False, True, {"success": False, "calls": self.calls}
        try:
            answer = f"{call.group(1).strip()} = {calculate(call.group(1))}"
        except ValueError as e:
            answer = f"The calculator cannot compute that: {e}."
        return answer, 0.0, False, False, {}


gym.register("GSM8KCalculator-v0", entry_point=GSM8KCalculator)
