"""Regenerate the recipes' default YAML files and the README's option tables from the config dataclasses.

    python recipes/configs/generate.py          # rewrite them
    python recipes/configs/generate.py --check  # exit 1 if any is stale (the test suite does this)

Never edit the tables or these YAML files by hand: change a field's default or help text instead.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "recipes"))

from cartpole import CartPoleConfig  # noqa: E402
from gsm8k_tiny import GSM8KConfig  # noqa: E402

from grpo_seq.cli import defaults_yaml, options_table  # noqa: E402

RECIPES = {
    "cartpole": (CartPoleConfig, "recipes/cartpole.py: every option with its default (python recipes/cartpole.py --config this.yaml)"),
    "gsm8k_tiny": (GSM8KConfig, "recipes/gsm8k_tiny.py: every option with its default (python recipes/gsm8k_tiny.py --config this.yaml)"),
}


def expected() -> dict[Path, str]:
    files = {HERE / f"{name}.yaml": defaults_yaml(cls, title) for name, (cls, title) in RECIPES.items()}
    readme = (ROOT / "README.md").read_text()
    for name, (cls, _) in RECIPES.items():
        start, end = f"<!-- options:{name}:start -->", f"<!-- options:{name}:end -->"
        if start not in readme or end not in readme:
            raise SystemExit(f"README.md has no {start} ... {end} markers")
        readme = re.sub(re.escape(start) + r".*?" + re.escape(end),
                        lambda _m: f"{start}\n{options_table(cls)}{end}", readme, flags=re.S)
    files[ROOT / "README.md"] = readme
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="Only report stale files (exit 1 if any).")
    a = ap.parse_args()
    stale = [p for p, text in expected().items() if not p.exists() or p.read_text() != text]
    if a.check:
        if stale:
            raise SystemExit(f"stale: {', '.join(str(p.relative_to(ROOT)) for p in stale)}; run python recipes/configs/generate.py")
        return
    for p, text in expected().items():
        if p in stale:
            p.write_text(text)
            print(f"wrote {p.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
