"""Threads from the cores other work leaves idle (grpo_seq.loop.cpu_share)."""

from __future__ import annotations

import os
from collections import namedtuple

import pytest

from grpo_seq.loop import cpu_share
from grpo_seq.loop.cpu_share import IdleCores, threads_for


@pytest.mark.parametrize("cores, others, processes, expected", [
    (2, 0.0, 1, 2),   # alone: every core
    (2, 1.0, 1, 1),   # another process keeps a core busy: the idle one
    (2, 0.3, 1, 2),   # a little other work: round(1.7) = 2
    (2, 0.6, 1, 1),   # round(1.4) = 1
    (2, 2.0, 1, 1),   # the machine is full: still one thread
    (16, 4.0, 2, 6),  # two processes share the 12 idle cores
    (16, 0.0, 2, 8),  # never more than a process's share of the cores
])
def test_threads_for(cores, others, processes, expected):
    assert threads_for(cores, others, processes) == expected


Times = namedtuple("Times", "user system children_user children_system elapsed")


def test_idle_cores_measures_the_busy_time_of_others(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    clock = {"t": 100.0, "own": 10.0}
    monkeypatch.setattr(cpu_share, "_PROC_STAT", stat)
    monkeypatch.setattr(cpu_share.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(cpu_share.os, "times", lambda: Times(clock["own"], 0.0, 0, 0, 0))
    hz = os.sysconf("SC_CLK_TCK")

    def write(busy_s: float, idle_s: float) -> None:  # user nice system idle iowait irq softirq steal
        stat.write_text(f"cpu  {int(busy_s * hz)} 0 0 {int(idle_s * hz)} 0 0 0 0 0 0\ncpu0 ...\n")

    cores = IdleCores(cores=2)
    write(1000, 5000)
    assert cores.threads() == 2  # nothing measured yet
    # 10 s later: the machine was busy 20 core-seconds, 10 of them this process's: others kept 1 core busy
    clock.update(t=110.0, own=20.0)
    write(1020, 5000)
    assert cores.threads() == 1 and cores.others_busy == pytest.approx(1.0)
    # the other work stopped: only this process's 15 core-seconds in 10 s
    clock.update(t=120.0, own=35.0)
    write(1035, 5005)
    assert cores.threads() == 2 and cores.others_busy == pytest.approx(0.0)


def test_without_proc_stat_the_count_stays_the_cores(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_share, "_PROC_STAT", tmp_path / "missing")
    cores = IdleCores(cores=4)
    assert cores.threads() == 4 and cores.threads() == 4


def test_an_interval_too_short_to_measure_keeps_measuring_from_the_last_sample(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    hz = os.sysconf("SC_CLK_TCK")
    clock = {"t": 0.0, "own": 0.0}
    monkeypatch.setattr(cpu_share, "_PROC_STAT", stat)
    monkeypatch.setattr(cpu_share.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(cpu_share.os, "times", lambda: Times(clock["own"], 0.0, 0, 0, 0))
    stat.write_text(f"cpu  {1000 * hz} 0 0 {5000 * hz} 0 0 0 0\n")
    cores = IdleCores(cores=2)  # the interval starts as it is made (before a model loads)
    clock.update(t=0.1)
    assert cores.threads() == 2  # 0.1 s: too short, nothing measured
    clock.update(t=5.0)
    stat.write_text(f"cpu  {1005 * hz} 0 0 {5005 * hz} 0 0 0 0\n")  # 5 core-seconds in 5 s, none of them ours
    assert cores.threads() == 1 and cores.others_busy == pytest.approx(1.0)


def test_a_users_omp_num_threads_caps_the_cores_a_launchers_does_not(monkeypatch):
    import os

    from grpo_seq.loop.cpu_share import usable_cores

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    every = usable_cores()
    assert every == len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert usable_cores() == 1  # the user's cap
    monkeypatch.setenv("OMP_NUM_THREADS", "100000")
    assert usable_cores() == every  # never more than the cores there are
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert usable_cores() == every  # accelerate launch's 1, not the user's: the processes share the cores
