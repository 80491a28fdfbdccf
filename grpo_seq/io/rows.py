"""Dataset rows that remember where each came from (``FILE line N``), for messages that name the row.

Its own module so that the readers (:mod:`grpo_seq.io.prompt_data`) and the sources they dispatch to
(:mod:`grpo_seq.io.sources`) both build them without importing each other.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["Rows", "row_place"]


class Rows(list):
    """A list of dataset rows that remembers where each came from (``FILE line N``), for messages."""

    def __init__(self, rows: Sequence[dict[str, Any]], places: Sequence[str]):
        super().__init__(rows)
        self.places = list(places)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Rows(list.__getitem__(self, i), self.places[i])
        return list.__getitem__(self, i)


def row_place(rows: Any, i: int, source: str = "dataset") -> str:
    """Where row ``i`` of ``rows`` came from: its file and line for :class:`Rows`, else ``source row i+1``."""
    return rows.places[i] if isinstance(rows, Rows) else f"{source} row {i + 1}"
