"""TRL's ``tools=`` and ``environment_factory=`` (grpo_seq/envs/text/tools.py, grpo_seq/trl/tools.py):
a scripted tool call masked token by token, TRL's error answers, and an environment's get_reward
reaching the advantages of a GRPOTrainer run."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch

from grpo_seq.envs.text.tools import ToolEnvSampler, call_tool, parse_reply
from grpo_seq.errors import UsageError
from grpo_seq.trl import GRPOConfig, GRPOTrainer
from tiny_lm import make_tiny_lm, make_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "text_env"))
from scripted_policy import ScriptedPolicy  # noqa: E402

# Qwen's layout on the tiny tokenizer: tools named in a system turn, calls as <tool_call>{json}</tool_call>,
# results in a "tool" turn
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\ntools:{% for t in tools %} {{ t.function.name }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first
        b: the second
    """
    return a + b


def fail(x: str) -> str:
    """Always raises.

    Args:
        x: anything
    """
    raise RuntimeError("boom")


async def async_add(a: int, b: int) -> int:
    """Add two numbers, asynchronously.

    Args:
        a: the first
        b: the second
    """
    return a + b


def tool_tokenizer():
    tok = make_tokenizer()
    tok.chat_template = TOOL_TEMPLATE
    return tok


CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


def test_a_tool_call_is_made_and_its_result_masked_token_by_token():
    tok = tool_tokenizer()
    rows = [{"prompt": [{"role": "user", "content": "2+3?"}], "answer": "5"}]
    s = ToolEnvSampler(tok, rows, num_groups=1, num_generations=2, tools=[add], max_reply_tokens=80,
                       max_total_tokens=400, max_conversation_tokens=200)
    # member 0 calls add(2, 3), then answers "5"; member 1 answers at once (no call: its episode ends)
    policy = ScriptedPolicy(tok, [[CALL + "$", "no$"], ["5$"]])
    batch = s.sample(policy)
    eos, ids = tok.eos_token_id, policy.ids
    # after the reply's own EOS: the template's "\n", the tool turn holding "5", the generation prompt
    glue = tok("\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    row0 = ids(CALL) + [eos] + glue + ids("5") + [eos]
    assert batch.tokens[0, :len(row0)].tolist() == row0
    want0 = [1] * (len(CALL) + 1) + [0] * len(glue) + [1] * 2
    assert batch.mask[0].int().tolist() == want0
    assert batch.mask[1].int().tolist() == [1] * 3 + [0] * (len(want0) - 3)  # "no" + EOS, then padding
    # the prompt rendered with the tools, as apply_chat_template(tools=...) renders them
    assert tok.decode(batch.context[0][batch.prompt_mask[0].bool()]).startswith("<|im_start|>system\ntools: add<|im_end|>")
    # the reward functions' inputs, in TRL's form
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    first, result, last = batch.text.completions[0]
    assert first["tool_calls"] == [call] and result == {"role": "tool", "name": "add", "content": "5"}
    assert last == {"role": "assistant", "content": "5"}
    assert batch.text.completions[1] == [{"role": "assistant", "content": "no"}]
    assert batch.text.prompts[0] == rows[0]["prompt"] and batch.text.columns == {"answer": ["5", "5"]}
    # TRL's tool metrics: 1 call over 2 conversations, none failed
    assert batch.metrics["tools/call_frequency"] == 0.5 and batch.metrics["tools/failure_frequency"] == 0.0


def test_tool_errors_answer_as_trl_answers_them():
    tools = {"add": add, "fail": fail, "async_add": async_add}
    def made(name, arguments):
        return call_tool(tools, {"type": "function", "function": {"name": name, "arguments": arguments}})

    assert made("add", {"a": 1, "b": 2}) == ({"role": "tool", "name": "add", "content": "3"}, False)
    assert made("async_add", {"a": 1, "b": 2}) == ({"role": "tool", "name": "async_add", "content": "3"}, False)
    assert made("fail", {"x": "1"}) == ({"role": "tool", "name": "fail", "content": "{'error': 'boom'}"}, True)
    assert made("nope", {})[0]["content"] == "{'error': 'Tool nope not found.'}"
    assert made("add", {"a": 1})[0]["content"].startswith("{'error': ")  # a missing argument: the TypeError's message
    # a call cut short is no call: the reply is plain text (and ends the episode)
    assert parse_reply(make_tokenizer(), '<tool_call>{"name": "ad') == {"role": "assistant", "content": '<tool_call>{"name": "ad'}
    # arguments typed by the tool's schema: "7" is an int for add
    assert parse_reply(make_tokenizer(), '<tool_call>{"name": "add", "arguments": {"a": "7", "b": 1}}</tool_call>',
                       [add])["tool_calls"][0]["function"]["arguments"] == {"a": 7, "b": 1}


def test_max_tool_calling_iterations_ends_the_conversation():
    tok = tool_tokenizer()
    s = ToolEnvSampler(tok, [{"prompt": "go"}], num_groups=1, num_generations=2, tools=[add], max_tool_calls=1,
                       max_reply_tokens=80, max_total_tokens=400)
    batch = s.sample(ScriptedPolicy(tok, [[CALL + "$", CALL + "$"], [CALL + "$", "x$"]]))
    # member 0's second call is past the limit: not made, the episode ends there (as TRL's loop stops)
    assert [m["role"] for m in batch.text.completions[0]] == ["assistant", "tool", "assistant"]
    assert batch.text.completions[1][-1] == {"role": "assistant", "content": "x"}


class Counter:
    """TRL's environment contract: reset(**row), public methods as tools, get_reward() for the trajectory."""

    made = itertools.count()

    def __init__(self):
        self.k = next(Counter.made)
        self.seen: dict = {}

    def reset(self, **row):
        self.seen = row
        return " (count)"

    def increment(self, by: int) -> int:
        """Add to the count.

        Args:
            by: how much
        """
        return by

    def get_reward(self) -> float:
        return float(self.k % 2)


def test_environment_factorys_get_reward_reaches_the_advantage(tmp_path):
    model, tok = make_tiny_lm()
    tok.chat_template = TOOL_TEMPLATE
    Counter.made = itertools.count()  # the probe is 0; the sampler's four environments 1..4
    rows = [{"prompt": [{"role": "user", "content": "count"}], "level": 3}]
    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=6, logging_steps=1, seed=0)
    trainer = GRPOTrainer(model=model, processing_class=tok, args=args, train_dataset=rows, environment_factory=Counter)
    assert trainer.reward_funcs[0].__name__ == "Counter"
    trainer.train()
    batch = trainer._run.trainer.last_batch
    # groups (env 1, env 2) and (env 3, env 4): rewards k % 2 = [1, 0, 1, 0]; within a group mean 0.5 and
    # (unbiased) std sqrt(0.5) = 0.7071, so advantages (r - 0.5) / 0.7071 = +-0.7071 on every reply token
    assert batch.rewards.tolist() == [1.0, 0.0, 1.0, 0.0]
    first = batch.advantages[:, 0].tolist()
    assert first == pytest.approx([0.7071, -0.7071, 0.7071, -0.7071], abs=1e-3)
    assert "rewards/Counter/mean" in trainer.state.log_history[0]
    env = trainer.environments[0]  # TRL's attribute: the conversations' environment objects, in batch order
    assert [e.k for e in trainer.environments] == [1, 2, 3, 4]
    assert env.seen == rows[0] and batch.text.prompts[0][-1]["content"] == "count (count)"  # reset's string appended
    assert [t.__name__ for t in trainer._run.trainer.sampler.envs[0].tools] == ["increment"]


def test_a_trl_script_with_tools_trains_and_its_reward_functions_see_the_tool_messages(tmp_path):
    model, tok = make_tiny_lm()
    tok.chat_template = TOOL_TEMPLATE
    seen = []

    def used_the_tool(completions, answer, **kwargs):
        seen.extend(completions)
        return [float(any(m["role"] == "tool" and m["content"] == a for m in c)) for c, a in zip(completions, answer)]

    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=120, logging_steps=1, log_completions=True, seed=0)
    trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=used_the_tool, args=args,
                          train_dataset=[{"prompt": "2+3?", "answer": "5"}], tools=[add])
    trainer._run.trainer.policy.generate = ScriptedPolicy(tok, [[CALL + "$", "no$"], ["5$"]]).generate
    trainer.train()
    batch = trainer._run.trainer.last_batch
    assert batch.rewards.tolist() == [1.0, 0.0] and [m["role"] for m in seen[0]] == ["assistant", "tool", "assistant"]
    logs = trainer.state.log_history[0]
    assert logs["tools/call_frequency"] == 0.5 and logs["tools/failure_frequency"] == 0.0
    # the tool's result (and the template around it) is not trained: 17 reply tokens + 2, the rest masked
    assert int(batch.mask[0].sum()) == len(CALL) + 1 + 2


def test_a_template_that_does_not_render_tools_is_refused():
    with pytest.raises(UsageError, match="does not render tools"):
        ToolEnvSampler(make_tokenizer(), [{"prompt": "x"}], num_groups=1, num_generations=2, tools=[add])


def test_environment_without_reset_and_no_reward_source_are_refused(tmp_path):
    class NoReset:
        def act(self) -> str:
            """Act."""
            return ""

    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1)
    with pytest.raises(UsageError, match="must define a callable `reset`"):
        GRPOTrainer(model="unused", args=args, train_dataset=[{"prompt": "x"}], environment_factory=NoReset)
    with pytest.raises(UsageError, match="No reward source"):
        GRPOTrainer(model="unused", args=args, train_dataset=[{"prompt": "x"}], tools=[add])
    # an environment that owns the data (no train_dataset) needs max_steps, as in TRL
    with pytest.raises(UsageError, match="`max_steps` must be set"):
        GRPOTrainer(model="unused", args=GRPOConfig(output_dir=str(tmp_path / "r2")), environment_factory=Counter)
    with pytest.raises(UsageError, match="`train_dataset` is required unless an `environment_factory`"):
        GRPOTrainer(model="unused", reward_funcs=[add], args=args)
