"""The agent tests' own agent programs (agent_programs.py) import by name, as a user's module would;
``example_agent`` imports one of examples/agent/ the same way."""

import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agent"


@pytest.fixture
def example_agent(monkeypatch):
    """``load(name)``: examples/agent/<name>.py imported by its name from that folder, forgotten after the test."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    loaded = []

    def load(name: str):
        loaded.append(name)
        return importlib.import_module(name)

    yield load
    for name in loaded:
        sys.modules.pop(name, None)
