"""recipes/agent.py's shipped defaults (recipes/configs/agent.yaml, generated) are its spec's, and
its spec refuses the language-model options an agent replaces."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from grpo_seq.cli import parse_config
from grpo_seq.errors import ConfigError
from grpo_seq.jobs import AgentJob

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_yaml_holds_exactly_the_recipes_defaults(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "recipes"))
    from agent import AgentConfig

    shipped = ROOT / "recipes" / "configs" / "agent.yaml"
    assert parse_config(AgentConfig, ["--config", str(shipped)]) == AgentConfig()
    assert set(yaml.safe_load(shipped.read_text())) == set(AgentConfig().to_dict())
    sys.modules.pop("agent", None)


@pytest.mark.parametrize("option, value, words", [
    ("reward_fns", ["m:f"], "--reward_fns: an agent's reward is what its rollout returns"),
    ("system_prompt", "Be brief.", "--system_prompt: an agent's prompts and rewards are its own"),
    ("rollout", "mymodule", "--rollout: give module:function"),
    ("max_total_tokens", 256, "--max_total_tokens: must exceed --max_completion_length"),
    ("endpoint_port", 70000, "--endpoint_port: must be a port"),
])
def test_the_spec_refuses_what_an_agent_run_cannot_use(option, value, words):
    with pytest.raises(ConfigError, match=f"^{words}"):
        AgentJob(**{option: value})
