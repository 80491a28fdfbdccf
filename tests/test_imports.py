"""What importing a part of grpo_seq loads: the light modules stay light (each check runs in a
fresh interpreter, since this test process has long imported everything)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("accelerate", "transformers", "gymnasium", "grpo_seq.trainer")


def loaded_after(statement: str, watched: tuple[str, ...]) -> list[str]:
    """The modules of ``watched`` present in ``sys.modules`` after running ``statement`` in a new process."""
    code = f"import json, sys\n{statement}\nprint(json.dumps([m for m in {list(watched)!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["grpo_seq", "grpo_seq.objective", "grpo_seq.advantages", "grpo_seq.config"])
def test_light_modules_do_not_import_the_trainer_or_its_dependencies(module):
    assert loaded_after(f"import {module}", HEAVY) == []


def test_public_names_still_resolve_from_the_package():
    assert loaded_after("from grpo_seq import GRPOTrainer, GRPOConfig, compute_advantages", HEAVY) != []
    import grpo_seq

    for name in grpo_seq.__all__:
        assert getattr(grpo_seq, name) is not None, name
    assert set(grpo_seq.__all__) <= set(dir(grpo_seq))
    with pytest.raises(AttributeError, match="no_such_name"):
        grpo_seq.no_such_name  # noqa: B018
