"""GracefulStop: a signal only sets a flag; the loop checkpoints and exits with 128 + signum."""

import os
import signal

from grpo_seq.loop.stopping import GracefulStop, resume_command


def test_sigterm_sets_the_flag_and_the_exit_code():
    with GracefulStop() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)  # handled: the process keeps running
        assert stop.requested and stop.signal_name == "SIGTERM" and stop.exit_code == 143
        assert stop.agreed() is True
    assert signal.getsignal(signal.SIGTERM) is not stop._handle  # the previous handler is back


def test_resume_command_keeps_the_flags_and_names_the_run():
    cmd = resume_command("runs/x", ["recipes/cartpole.py", "--seed", "3", "--resume_from=old"])
    assert cmd == "python recipes/cartpole.py --seed 3 --resume_from runs/x"


def test_the_learning_rate_schedule_follows_max_minutes_when_it_comes_before_max_steps():
    """``--lr_schedule linear`` decays over the run's progress: of max_steps, or of --max_minutes
    when that limit ends the run first (a step bound far above what the minutes allow)."""
    import time
    from types import SimpleNamespace

    from grpo_seq.jobs.lm import _progress

    def run(step, max_steps, minutes):
        return SimpleNamespace(trainer=SimpleNamespace(step_count=step), accelerator=None,
                               spec=SimpleNamespace(max_steps=max_steps, max_minutes=minutes))

    now = time.perf_counter()
    assert _progress(run(3, 10, 0.0), now - 600) == 0.3  # no time limit: steps alone
    assert 0.5 <= _progress(run(3, 100_000, 1.0), now - 30) < 0.6  # 30 s of a minute
    assert _progress(run(9, 10, 100.0), now - 30) == 0.9  # the steps run out first
    assert _progress(run(3, 100_000, 1.0), now - 120) == 1.0  # past the limit: no negative rate
