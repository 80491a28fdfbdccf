"""Calls that arrive together, generated together: concurrent rollouts share the decode batch.

A request thread queues its call and takes the generation lock. Whoever gets the lock first takes
every call queued by then and generates them as one batch (:func:`generate_rows`), one row per
choice, prompts left-padded; the others find theirs done when the lock comes to them. Concurrent
rollouts send their calls a few milliseconds apart, so before it takes the queue the lock holder
waits for the calls of the other open rollouts while they keep arriving: until every open rollout
has a call queued, or ``quiet`` seconds pass with no new call (a rollout running a tool, or one
that has ended). A call alone, with no other rollout open, is generated at once. Calls that sample
differently (a greedy ``/v1`` call beside a rollout's) go in batches of their own.

Each row is cut at its own call's ``max_tokens`` and its first end-of-turn token: a longer batch
mate changes how far the batch decodes, never what a row's tokens or log-probs are.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .trajectory import Trajectory

__all__ = ["Job", "DecodeBatcher", "generate_rows"]

Sampled = tuple[list[int], list[float], bool]  # a choice's ids, their log-probs, whether it ended


@dataclass
class Job:
    """One call waiting for generation: its prompt, choices, limit and sampling; then its result."""

    prompt: list[int]
    n: int
    max_new: int
    sampling: dict[str, Any]
    trajectory: Trajectory | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)  # the request's, as recorded
    tools: bool = False  # whether tools were offered: a reply's tool calls are parsed out
    result: Any = None
    error: BaseException | None = None
    done: bool = False
    key: tuple = field(init=False)

    def __post_init__(self) -> None:
        self.key = tuple(sorted(self.sampling.items()))


class DecodeBatcher:
    """Runs ``generate(jobs)`` under ``lock`` for every job queued when the lock is taken, after
    waiting for the calls ``open_rollouts()`` says may still come (at most ``quiet`` seconds
    between arrivals).

    ``generate`` must mark every job ``done`` (with its ``result`` or ``error``)."""

    def __init__(self, lock: threading.Lock, generate: Callable[[list[Job]], None],
                 open_rollouts: Callable[[], int] = lambda: 0, quiet: float = 0.02):
        self.lock, self._generate = lock, generate
        self.open_rollouts, self.quiet = open_rollouts, quiet
        self._queue: list[Job] = []
        self._arrived = threading.Condition()  # guards the queue; notified at each arrival
        self.batches = self.jobs = 0  # batches generated, calls in them: their ratio is the sharing

    def queue(self, job: Job) -> None:
        """Put ``job`` in the next batch (:meth:`run` generates it)."""
        with self._arrived:
            self._queue.append(job)
            self._arrived.notify_all()

    def _gather(self) -> list[Job]:
        """Under the lock: the queue, once every open rollout has a call in it or the calls stopped coming."""
        with self._arrived:
            while len({id(j.trajectory) for j in self._queue if j.trajectory is not None}) < self.open_rollouts():
                if not self._arrived.wait(self.quiet):
                    break
            jobs, self._queue = self._queue, []
        return jobs

    def run(self, job: Job) -> Any:
        """``job``'s result once generated (with whatever was queued beside it); raises its error."""
        self.queue(job)
        with self.lock:
            if not job.done:
                jobs = self._gather()
                self.batches, self.jobs = self.batches + 1, self.jobs + len(jobs)
                try:
                    self._generate(jobs)
                finally:
                    for j in jobs:
                        j.done = True
        if job.error is not None:
            raise job.error
        return job.result


def generate_rows(policy: torch.nn.Module, jobs: list[Job], pad_id: int, eos_ids: list[int],
                  autocast: tuple[str, torch.dtype] | None) -> list[list[Sampled]]:
    """Every job's ``n`` choices, from one generate call (the jobs share their sampling): per job,
    per choice, its ids up to its end of turn or its ``max_new``, their float32 log-probs under the
    distribution they were drawn from, and whether it ended."""
    prompts = [job.prompt for job in jobs for _ in range(job.n)]
    width = max(len(p) for p in prompts)
    device = next(policy.parameters()).device
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=device)
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    cast = torch.autocast(autocast[0], dtype=autocast[1]) if autocast else contextlib.nullcontext()
    with cast, torch.no_grad():
        out, logprobs = policy.generate(ids, attention, num_return_sequences=1,
                                        max_new_tokens=max(j.max_new for j in jobs), pad_token_id=pad_id,
                                        eos_token_id=eos_ids, output_logprobs=True, **jobs[0].sampling)
    rows, lps = out[:, width:].tolist(), logprobs.float().tolist()
    results, r = [], 0
    for job in jobs:
        choices = []
        for row, row_lp in zip(rows[r:r + job.n], lps[r:r + job.n]):
            row = row[:job.max_new]
            k = next((i + 1 for i, t in enumerate(row) if t in eos_ids), len(row))
            choices.append((row[:k], row_lp[:k], bool(row) and row[k - 1] in eos_ids))
        results.append(choices)
        r += job.n
    return results
