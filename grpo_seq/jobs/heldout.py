"""The held-out evaluation of a language model's run: the model it starts from before the first
step, the trained model after the last, on the same items (:mod:`grpo_seq.scoring.heldout` has the
figures and why each is there).

Everything goes to ``<output_dir>/eval_heldout/``: ``eval.json``, ``base.jsonl`` and
``trained.jsonl`` (each item's prompt, completion, gold answer and score), and the summary's
``heldout``; one line says it at the end. ``max_steps 0`` scores the base model alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..scoring.heldout import HeldOutSet, best_constant_of, compare, summary_line
from ..io.serialization import atomic_write_text
from .callbacks import JobCallbacks

__all__ = ["HeldOutEval"]


class HeldOutEval(JobCallbacks):
    """Scores the base model when the run starts and the trained one when it ends (main process
    only); a resumed run reuses the base scores its folder holds."""

    def __init__(self, heldout: HeldOutSet, output_dir: str | Path):
        self.set, self.out = heldout, Path(output_dir) / "eval_heldout"
        self.base: list[dict] | None = None

    def on_start(self, run: Any) -> None:
        if not run.is_main_process:
            return
        saved = self.out / "base.jsonl"
        if run.trainer.step_count and saved.exists():
            self.base = [json.loads(line) for line in saved.read_text().splitlines() if line.strip()]
        if self.base is None or len(self.base) != len(self.set.rows):
            run.say(f"scoring the base model on {len(self.set.rows)} held-out items")
            policy = run.trainer.policy
            self.base = self.set.answer(policy.model, policy.tokenizer)

    def on_end(self, run: Any, summary: dict[str, Any]) -> None:
        if not run.is_main_process or self.base is None:
            return
        trained = None
        if run.trainer.step_count:
            policy = run.trainer.policy
            trained = self.set.answer(policy.model, policy.tokenizer)
        constant = best_constant_of(self.set, self.base, *([trained] if trained else []))
        result = {"metric": self.set.metric, "steps": run.trainer.step_count,
                  **compare([r["score"] for r in self.base], [r["score"] for r in trained] if trained else None, constant)}
        atomic_write_text(self.out / "base.jsonl", "".join(json.dumps(r) + "\n" for r in self.base))
        if trained:
            atomic_write_text(self.out / "trained.jsonl", "".join(json.dumps(r) + "\n" for r in trained))
        atomic_write_text(self.out / "eval.json", json.dumps(result, indent=2))
        summary["heldout"] = result
        run.say(summary_line(result))
