"""Agent programs for the tests, written against the openai package as a user's would be."""

from __future__ import annotations

TOOL = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate arithmetic.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]


async def _model(client) -> str:
    return (await client.models.list()).data[0].id


async def tool_then_answer(client, item) -> dict:
    """Two calls with a tool's result in between; the reward is the final reply's length, so that
    a group's rewards differ and a step has something to learn."""
    model = await _model(client)
    messages = [{"role": "user", "content": item["question"]}]
    first = (await client.chat.completions.create(model=model, messages=messages, tools=TOOL)).choices[0].message
    messages += [first.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": "call_0", "content": "TOOL-RESULT 42"}]
    final = (await client.chat.completions.create(model=model, messages=messages, tools=TOOL)).choices[0].message
    return {"reward": len(final.content or "") / 10, "metrics": {"first_length": float(len(first.content or ""))}}


async def says_great(client, item):
    await client.chat.completions.create(model=await _model(client), messages=[{"role": "user", "content": "hi"}])
    return "great"


async def never_calls(client, item):
    return 1.0


async def crashes(client, item):
    raise RuntimeError("the tool server is down")


def not_async(client, item):
    return 1.0


async def fails_on_ones(client, item):
    """A short answer's length, except on an item about 1, where its tool fails."""
    if item["question"].startswith("1 "):
        raise RuntimeError("the tool server is down")
    messages = [{"role": "user", "content": item["question"]}]
    reply = await client.chat.completions.create(model=await _model(client), messages=messages)
    return len(reply.choices[0].message.content or "") / 10


async def hangs(client, item):
    """Waits for what never comes (a tool that never answers)."""
    import asyncio

    await asyncio.Event().wait()


RUNNING = {"now": 0, "most": 0}


async def counts_company(client, item) -> dict:
    """One call; reports how many rollouts of this process were running at most, so far."""
    RUNNING["now"] += 1
    RUNNING["most"] = max(RUNNING["most"], RUNNING["now"])
    try:
        messages = [{"role": "user", "content": item["question"]}]
        await client.chat.completions.create(model=await _model(client), messages=messages)
    finally:
        RUNNING["now"] -= 1
    return {"reward": 0.0, "metrics": {"most_at_once": float(RUNNING["most"])}}


async def summarises_then_answers(client, item) -> dict:
    """Two calls, the second over a rewritten history (a summary of the first exchange, not its
    messages): two sequences in one rollout."""
    model = await _model(client)
    first = (await client.chat.completions.create(model=model, messages=[{"role": "user", "content": item["question"]}]))
    summary = f"Earlier you said: {first.choices[0].message.content!r}. Answer {item['question']}"
    final = (await client.chat.completions.create(model=model, messages=[{"role": "user", "content": summary}]))
    return len(final.choices[0].message.content or "") / 10
