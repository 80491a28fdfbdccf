"""A curriculum over a dataset's stages: prompts drawn from one stage at a time, the next opening
once the current one is learned.

A dataset whose rows carry a ``stage`` (a number; lower is easier) is a curriculum. Prompts come
from the lowest stage first; after each step the metric (the mean of a reward function over the
step's completions) joins the current stage's record, and once the mean of its last ``window``
values reaches ``threshold`` the next stage opens (its record starts empty). The last stage stays
open to the end. Only the current stage is drawn: the reward is then measured on the stage it
decides about, and a group from an easier stage, mostly right by then, would carry little signal.

Why a curriculum at all: a group whose completions all fail teaches nothing (every advantage is 0),
so on a task where the model starts near 0 most steps are lost; an easier stage first gives groups
with some right answers, and what is learned there carries to the harder stage.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["Curriculum"]


class Curriculum:
    """Which rows to draw from: ``stages`` (one per row, numbers) grouped and opened in order.

    Args:
        stages: each row's stage.
        threshold: the mean metric over the last ``window`` steps that opens the next stage.
        window: steps of the current stage that the mean covers (>= 1).
    """

    def __init__(self, stages: Sequence[Any], threshold: float, window: int):
        if window < 1:
            raise ValueError(f"Curriculum: window must be >= 1, got {window}")
        bad = [i for i, s in enumerate(stages) if isinstance(s, bool) or not isinstance(s, (int, float))]
        if bad:
            raise ValueError(f"row {bad[0] + 1}: its 'stage' must be a number, got {stages[bad[0]]!r}")
        self.levels = sorted(set(stages))
        self._rows = {level: [i for i, s in enumerate(stages) if s == level] for level in self.levels}
        self.threshold, self.window = threshold, window
        self.current = 0  # index into levels
        self.recent: list[float] = []

    @property
    def stage(self) -> Any:
        """The stage now drawn."""
        return self.levels[self.current]

    def rows(self) -> list[int]:
        """The indices of the rows of the current stage."""
        return self._rows[self.stage]

    def observe(self, value: float | None) -> bool:
        """Record one step's metric (None: the step scored nothing, not recorded); True when
        that opened the next stage."""
        if value is None or self.current == len(self.levels) - 1:
            return False
        self.recent = (self.recent + [float(value)])[-self.window:]
        if len(self.recent) == self.window and sum(self.recent) / self.window >= self.threshold:
            self.current += 1
            self.recent = []
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        """The stage and its record (JSON-able), for checkpoints."""
        return {"current": self.current, "recent": list(self.recent), "levels": list(self.levels)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["levels"]) != self.levels:
            raise ValueError(f"the checkpoint's curriculum had the stages {state['levels']}, this dataset has "
                             f"{self.levels}; resume with the same --dataset")
        self.current, self.recent = int(state["current"]), [float(v) for v in state["recent"]]
