"""A calculator agent, written against the ``openai`` package alone: nothing here knows grpo-seq.

Two calls with a calculator's result in between: the model is asked the question with a
``calculator`` tool; the agent runs the calculator on the expression the model gave (through a
tool call, or its plain reply), hands the result back (a ``tool`` message after a tool call, a
user message otherwise), and asks for the final answer. The reward is 1 when the final answer
holds the item's ``answer``.

Pointed at any OpenAI-compatible server it runs as it is:

    import asyncio, openai
    client = openai.AsyncOpenAI(base_url="http://localhost:8000/v1", api_key="...")
    asyncio.run(rollout(client, {"question": "What is 12 * 7?", "answer": "84"}))

and grpo-seq trains it unchanged, from this folder (each rollout gets a client of its own):

    grpo-seq train-agent --model HuggingFaceTB/SmolLM2-135M-Instruct --rollout calculator_agent:rollout \\
        --dataset train.jsonl --eval_dataset dev.jsonl
"""

from __future__ import annotations

import ast
import json
import operator
import re

SYSTEM = ("You solve arithmetic word problems. First call the calculator with an arithmetic expression for the "
          "question; then, given its result, reply with the final answer as a number.")
TOOLS = [{
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}]
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.USub: operator.neg, ast.UAdd: operator.pos}


def calculate(expression: str) -> str:
    """The value of an arithmetic expression, or why there is none (never raises: a bad
    expression is the model's mistake, reported back to it)."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.operand))
        raise ValueError("only numbers, + - * / and parentheses")

    try:
        result = value(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError) as e:
        return f"error: {e}"
    return f"{result:g}" if isinstance(result, float) else str(result)


def _expression(message) -> str:
    """The expression the model gave: its first calculator call's, else its reply's text."""
    for call in message.tool_calls or []:
        try:
            return str(json.loads(call.function.arguments).get("expression", ""))
        except (json.JSONDecodeError, AttributeError):
            return call.function.arguments
    return message.content or ""


async def rollout(client, item: dict) -> dict:
    """One attempt at ``item["question"]``; the reward is whether the final answer holds ``item["answer"]``."""
    model = (await client.models.list()).data[0].id
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": item["question"]}]
    first = (await client.chat.completions.create(model=model, messages=messages, tools=TOOLS)).choices[0].message
    messages.append(first.model_dump(exclude_none=True))
    result = calculate(_expression(first))
    if first.tool_calls:
        messages.append({"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": result})
    else:
        messages.append({"role": "user", "content": f"The calculator says: {result}. What is the final answer?"})
    final = (await client.chat.completions.create(model=model, messages=messages, tools=TOOLS)).choices[0].message
    numbers = re.findall(r"-?\d+(?:\.\d+)?", final.content or "")
    correct = bool(numbers) and numbers[-1] == str(item["answer"])
    return {"reward": float(correct), "metrics": {"tool_called": float(bool(first.tool_calls)),
                                                  "calculator_ok": float(not result.startswith("error"))}}
