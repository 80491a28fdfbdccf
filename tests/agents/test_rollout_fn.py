"""The user's rollout function: found by import path, and its results checked, each refusal one line
naming the function (and the item)."""

from __future__ import annotations

import math

import pytest

from grpo_seq.agents.rollout_fn import RolloutResult, check_result, load_rollout
from grpo_seq.errors import UsageError

CULPRIT = "rollout m:f on item items.jsonl line 3"


def test_a_rollout_is_found_by_import_path():
    from agent_programs import tool_then_answer

    assert load_rollout("agent_programs:tool_then_answer") is tool_then_answer


@pytest.mark.parametrize("path, words", [
    ("agent_programs", "give module:function"),
    ("no_such_module_here:rollout", "no module 'no_such_module_here'"),
    ("agent_programs:missing", "'agent_programs' has no attribute 'missing'"),
    ("agent_programs:not_async", "must be an async function"),
])
def test_a_rollout_that_cannot_be_loaded_is_named(path, words):
    with pytest.raises(UsageError, match=f"^--rollout {path}: .*{words}"):
        load_rollout(path)


def test_results_become_a_reward_with_per_call_rewards_and_metrics():
    assert check_result(1, 2, CULPRIT) == RolloutResult(1.0)
    got = check_result({"reward": 0.5, "call_rewards": [0.25, 0.25], "metrics": {"tools": 1}}, 2, CULPRIT)
    assert got == RolloutResult(0.5, [0.25, 0.25], {"tools": 1.0})


@pytest.mark.parametrize("result, words", [
    ("great", "returned 'great'; a rollout returns a finite number"),
    (math.nan, "returned nan"),
    (True, "returned True"),
    ({"score": 1}, r"returned a dict with \['score'\]"),
    ({"reward": None}, "returned reward None"),
    ({"reward": 1, "call_rewards": [1]}, r"returned call_rewards \[1\]; give one finite number per call it made \(2\)"),
    ({"reward": 1, "metrics": {"x": "high"}}, "returned metrics"),
])
def test_a_bad_result_is_one_line_naming_the_rollout_and_item(result, words):
    with pytest.raises(UsageError, match=f"^{CULPRIT}: {words}"):
        check_result(result, 2, CULPRIT)
