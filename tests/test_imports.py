"""What importing a part of grpo_seq loads: the light modules stay light (each check runs in a
fresh interpreter, since this test process has long imported everything)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("accelerate", "transformers", "gymnasium", "grpo_seq.loop.trainer")


def loaded_after_each(statements: list[str], watched: tuple[str, ...]) -> list[list[str]]:
    """The modules of ``watched`` in ``sys.modules`` after each statement in turn, in one new process:
    what is loaded only grows, so a module first seen after a statement was loaded by it (one
    interpreter's start-up, not one each)."""
    code = "import json, sys\n" + "".join(
        f"{statement}\nprint(json.dumps([m for m in {list(watched)!r} if m in sys.modules]))\n" for statement in statements)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.strip().splitlines()[-len(statements):]]


def test_light_modules_do_not_import_the_trainer_or_its_dependencies_nor_the_task_package():
    modules = ["grpo_seq", "grpo_seq.math.objective", "grpo_seq.math.advantages", "grpo_seq.loop.config"]
    # last, in the same interpreter: the library's reward, data and model modules leave reward_fns unloaded
    library = "import grpo_seq.scoring.rewards, grpo_seq.io.prompt_data, grpo_seq.io.models"
    *light, last = loaded_after_each([f"import {m}" for m in modules] + [library], (*HEAVY, "reward_fns"))
    assert dict(zip(modules, light)) == {m: [] for m in modules}
    assert "reward_fns" not in last


def test_public_names_still_resolve_from_the_package():
    import grpo_seq

    for name in grpo_seq.__all__:
        assert getattr(grpo_seq, name) is not None, name
    assert set(grpo_seq.__all__) <= set(dir(grpo_seq))
    with pytest.raises(AttributeError, match="no_such_name"):
        grpo_seq.no_such_name  # noqa: B018


def test_the_library_holds_no_task_knowledge():
    """No GSM8K prompt, task or default model inside grpo_seq: those are the recipes' and
    reward_fns'. The one exception is models.py's table of models shipped in wheels."""
    package = Path(__file__).resolve().parents[1] / "grpo_seq"
    found = []
    for path in sorted(package.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        text = path.read_text(errors="ignore")
        if path.relative_to(package) == Path("io", "models.py"):  # the table is model resolution, not task knowledge
            start = text.index("OFFLINE_WHEELS: dict")
            text = text[:start] + text[text.index("\n}\n", start):]
        found += [f"{path.relative_to(package)}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1)
                  if re.search("gsm8k|smollm2", line, re.IGNORECASE)]
    assert found == []
