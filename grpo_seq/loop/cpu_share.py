"""How many torch threads a step should use when other work shares the machine.

torch's CPU kernels split each operation evenly over their threads and wait, spinning, for the
last one. When another process keeps a core busy, the thread that shares that core is descheduled
for whole time slices while its partner spins: each small operation (a decode step is thousands of
them) then waits milliseconds instead of microseconds, and a step takes several times longer
with two threads than with one (``benchmarks/lm_step_phases.py`` measures it on your machine).
Asking for fewer threads than the cores that are busy with other work avoids that wait.

:class:`IdleCores` measures, between two calls, how many cores the rest of the machine kept busy
(the kernel's count of busy CPU time, ``/proc/stat``, less this process's own), and
:func:`threads_for` turns that into a thread count. Linux only; elsewhere the count stays the one
configured.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["IdleCores", "threads_for", "usable_cores"]

_PROC_STAT = Path("/proc/stat")
# Shorter intervals are too coarse to measure: the kernel counts CPU time in ticks of 10 ms.
MIN_INTERVAL = 0.5


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's), at most
    ``OMP_NUM_THREADS`` where the user set it: in a process no launcher started (a launcher sets it
    to 1 for its processes, ``LOCAL_WORLD_SIZE`` beside it, and their share of the cores is theirs)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    asked = os.environ.get("OMP_NUM_THREADS", "")
    if "LOCAL_WORLD_SIZE" not in os.environ and asked.isdigit() and int(asked) >= 1:
        cores = min(cores, int(asked))
    return cores


def _busy_seconds() -> float | None:
    """CPU seconds every core of the machine has spent busy since boot (not idle, not waiting for
    I/O), from the first line of ``/proc/stat``; None where there is no such file."""
    try:
        fields = _PROC_STAT.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    ticks = [int(x) for x in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is already counted in user


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


def threads_for(cores: int, others_busy: float, processes: int = 1) -> int:
    """Threads for one of ``processes`` training processes on ``cores`` cores while other work
    keeps ``others_busy`` cores busy: the idle cores, shared evenly, at least one.

        threads = max(1, round((cores - others_busy) / processes))
    """
    return max(1, min(cores // processes or 1, round((cores - others_busy) / processes)))


class IdleCores:
    """Between calls of :meth:`threads`, how busy the rest of the machine was, and so how many
    threads the next step should use, measured from when it was made; until half a second has
    passed, the cores (or the last measurement's count)."""

    def __init__(self, processes: int = 1, cores: int | None = None):
        self.processes = processes
        self.cores = cores or usable_cores()
        self.others_busy = 0.0  # cores the rest of the machine kept busy over the last interval
        self._last = self._sample()  # the first interval starts now (made before a model loads, it covers the load)

    def _sample(self) -> tuple[float, float, float] | None:
        busy = _busy_seconds()
        return None if busy is None else (time.monotonic(), busy, _own_seconds())

    def threads(self) -> int:
        """The thread count for the next step (measured over the interval since the last call)."""
        now = self._sample()
        if now is not None and self._last is not None and now[0] - self._last[0] < MIN_INTERVAL:
            return threads_for(self.cores, self.others_busy, self.processes)  # too short to tell: measure on
        if now is not None and self._last is not None:
            wall = now[0] - self._last[0]
            # other processes of this run (several per machine) count as theirs, not as others'
            others = (now[1] - self._last[1]) - (now[2] - self._last[2]) * self.processes
            self.others_busy = min(float(self.cores), max(0.0, others / wall))
        self._last = now
        return threads_for(self.cores, self.others_busy, self.processes)
