"""What an agent costs over the LM job on the same work: seconds a step, train-agent against train-lm.

    python benchmarks/agent_overhead.py                               # SmolLM2-135M-Instruct, 6 steps, 2 repeats
    python benchmarks/agent_overhead.py --model tiny/ --steps 2 --repeats 1 --out /tmp/ao.json   # a quick look

Both sides train the same model on the same prompts (``examples/prompts.jsonl``) with the same
reward (``examples/myrewards.py:brevity``) and settings (G, prompts a step, most new tokens, seed).
``train-lm`` samples the completions itself; ``train-agent`` runs an agent that makes the same one
chat call through the OpenAI client (``agent.py`` below), so the step pays for the endpoint: HTTP
on 127.0.0.1, the client, asyncio, and the decode batch gathered from the concurrent calls. Each
run is a command of its own, in a fresh process, the two sides alternating; seconds a step are
the median of a run's steps after the first (``perf/step_seconds`` in its metrics.jsonl), then the
median over repeats. The overhead is agent over LM, minus 1.

Writes benchmarks/results/agent_overhead/result.json; ``python benchmarks/report.py`` renders it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

import record  # benchmarks/record.py: default --out and the meta block

ROOT = Path(__file__).resolve().parents[1]
AGENT = '''"""One chat call with the item's messages; the reward is the LM job's (myrewards.brevity)."""
from myrewards import brevity


async def rollout(client, item):
    model = (await client.models.list()).data[0].id
    reply = await client.chat.completions.create(model=model, messages=item["prompt"])
    return brevity([[{"role": "assistant", "content": reply.choices[0].message.content or ""}]])[0]
'''


def commands(a: argparse.Namespace, out: Path) -> dict[str, list[str]]:
    common = ["--model", a.model, "--dataset", "prompts.jsonl", "--max_steps", str(a.steps),
              "--num_generations", str(a.G), "--num_groups", str(a.groups), "--max_completion_length", str(a.tokens),
              "--seed", "0", "--torch_threads", str(a.threads), "--save_steps", "0", "--log_completions_every", "0"]
    grpo = [sys.executable, "-m", "grpo_seq.cli.commands"]
    return {"lm": [*grpo, "train-lm", *common, "--reward_funcs", "myrewards:brevity", "--output_dir", str(out / "lm")],
            "agent": [*grpo, "train-agent", *common, "--rollout", "agent:rollout", "--output_dir", str(out / "agent")]}


def one_run(cmd: list[str], work: Path, run_dir: Path) -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": str(ROOT)}
    res = record.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd[3:5])} failed (status {res.returncode}):\n{res.stderr[-3000:]}")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "perf/step_seconds" in r]
    seconds = [r["perf/step_seconds"] for r in steps]
    return {"step_seconds": seconds, "median_after_first": statistics.median(seconds[1:] or seconds),
            "generation_seconds": [r.get("perf/generation_seconds") for r in steps],
            "calls_per_decode_batch": [r.get("agent/calls_per_decode_batch") for r in steps]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--G", type=int, default=4)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--scratch", type=Path, default=Path("agent_overhead_scratch"))
    ap.add_argument("--note", default="")
    ap.add_argument("--out", type=Path, default=record.default_out("agent_overhead"))
    a = ap.parse_args()
    work = a.scratch.resolve()
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "examples/prompts.jsonl", work / "prompts.jsonl")
    shutil.copy(ROOT / "examples/myrewards.py", work / "myrewards.py")
    (work / "agent.py").write_text(AGENT)
    cmds = commands(a, work / "runs")
    runs = {"lm": [], "agent": []}
    for _ in range(a.repeats):
        for side in ("lm", "agent"):  # alternating: whatever else the machine does meets both
            runs[side].append(one_run(cmds[side], work, work / "runs" / side))
    per_step = {side: statistics.median(r["median_after_first"] for r in rs) for side, rs in runs.items()}
    result = {"meta": {**record.meta(), **({"note": a.note} if a.note else {})},
              "settings": {k: getattr(a, k) for k in ("model", "steps", "repeats", "G", "groups", "tokens", "threads")},
              "commands": {side: " ".join(c[3:]) for side, c in cmds.items()}, "runs": runs,
              "step_seconds": per_step, "overhead": per_step["agent"] / per_step["lm"] - 1}
    out = record.prepare(a.out)
    out.write_text(json.dumps(result, indent=1))
    print(f"seconds a step: lm {per_step['lm']:.2f}, agent {per_step['agent']:.2f}; overhead {result['overhead']:+.1%}")


if __name__ == "__main__":
    main()
