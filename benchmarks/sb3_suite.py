"""The adapted Stable-Baselines3 tests (tests/sb3_suite/) against SB3's PPO and against our GRPO,
on this machine: per side, the cases passed, skipped (with why), expected to fail and failed.

    python benchmarks/sb3_suite.py

Each side is one pytest run of tests/sb3_suite with ``SB3_SUITE_ALGO`` set (serial, so a case's
outcome does not depend on a neighbour). On the GRPO side the cases listed in the suite's
``GRPO_FAILS`` are strict expected failures. Writes benchmarks/results/sb3_suite/result.json;
``python benchmarks/report.py`` puts the counts in docs/guides/sb3.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import record  # benchmarks/record.py: default --out and the meta block

ROOT = Path(__file__).resolve().parents[1]


def outcomes(junit: Path) -> dict[str, dict[str, str]]:
    """``case id -> {"outcome": passed | skipped | xfailed | failed, "why": ...}`` from pytest's JUnit XML."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rpartition('.')[2]}.py::{case.get('name')}"
        # an Element with no children is falsy: test against None, never with ``or``
        failed = next((e for e in (case.find("failure"), case.find("error")) if e is not None), None)
        skipped = case.find("skipped")
        if failed is not None:
            out[name] = {"outcome": "failed", "why": (failed.get("message") or "")[:200]}
        elif skipped is not None:
            xfail = skipped.get("type") == "pytest.xfail"
            out[name] = {"outcome": "xfailed" if xfail else "skipped", "why": (skipped.get("message") or "")[:200]}
        else:
            out[name] = {"outcome": "passed", "why": ""}
    return out


def same_case(name: str) -> str:
    """A case's id with the class it ran as left out (``[env1-GRPO]`` and ``[env1-PPO]`` alike)."""
    return name.replace("GRPO", "ALGO").replace("PPO", "ALGO")


def run_side(algo: str) -> dict[str, dict[str, str]]:
    with tempfile.TemporaryDirectory() as d:
        junit = Path(d, "junit.xml")
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                        "tests/sb3_suite", f"--junitxml={junit}"], cwd=ROOT,
                       env={**os.environ, "SB3_SUITE_ALGO": algo, "TQDM_DISABLE": "1"}, capture_output=True)
        return outcomes(junit)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=record.default_out("sb3_suite"))
    a = ap.parse_args()
    import torch

    sides = {algo: run_side(algo) for algo in ("ppo", "grpo")}
    counts = {algo: {k: sum(c["outcome"] == k for c in cases.values()) for k in ("passed", "skipped", "xfailed", "failed")}
              | {"cases": len(cases)} for algo, cases in sides.items()}
    grpo = {same_case(n): c for n, c in sides["grpo"].items()}  # a case's id names the class it runs
    ppo_only = sorted(n for n, c in sides["ppo"].items()
                      if c["outcome"] == "passed" and grpo.get(same_case(n), {}).get("outcome") != "passed")
    result = {"meta": record.meta(),
              "settings": {"tensorboard": importlib.util.find_spec("tensorboard") is not None,
                           "cuda": torch.cuda.is_available()},
              "counts": counts, "passed_by_ppo_only": ppo_only, "cases": sides}
    record.prepare(a.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"counts": counts, "passed_by_ppo_only": ppo_only}, indent=1))


if __name__ == "__main__":
    main()
