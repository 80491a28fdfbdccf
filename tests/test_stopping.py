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
