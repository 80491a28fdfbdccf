"""``grpo-seq launch``: ``accelerate launch`` for the project's programs, quiet and exact.

    grpo-seq launch --num_processes 2 recipes/cartpole.py --seed 3     # 2 processes (gloo on a CPU-only machine)
    grpo-seq launch --num_processes 8 --mixed_precision bf16 my_recipe.py        # 8 GPUs, bf16

The options are accelerate launch's own (``grpo-seq launch --help``). What differs:
- several processes run as ``--multi_gpu``, which on a CPU-only machine starts real processes over
  gloo (``--cpu --num_processes 2`` would silently start one);
- without an accelerate config file, the values accelerate would pick and warn about are given:
  one machine, no mixed precision unless asked, no dynamo, the machine's cores shared among the
  processes;
- a program that fails ends the launch with its own exit status: a usage error is its one
  ``error: ...`` line (said by the first process only), with no launcher traceback after it.
"""

from __future__ import annotations

import logging
import os
import subprocess
from typing import Any, Sequence

__all__ = ["launch"]


def _fill_defaults(args: Any) -> None:
    """The values ``accelerate launch`` would choose itself, and warn that it did."""
    from accelerate.commands.config import default_config_file

    if args.num_processes is None:
        args.num_processes = 1
    distributed = (args.multi_gpu, args.use_deepspeed, args.use_fsdp, args.use_megatron_lm, args.tpu)
    if args.num_processes > 1 and not any(distributed):
        args.multi_gpu = True
    if args.config_file is not None or os.path.isfile(default_config_file):
        return  # the user's own settings
    for name, value in (("num_machines", 1), ("mixed_precision", "no"), ("dynamo_backend", "no")):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.num_cpu_threads_per_process is None:
        args.num_cpu_threads_per_process = max(1, (os.cpu_count() or 1) // args.num_processes)


def _exit_status(error: BaseException) -> int:
    """The exit status of the process that failed first (torchrun's root cause)."""
    first = getattr(error, "get_first_failure", None)
    if first is not None:
        return int(first()[1].exitcode) or 1
    return 1


def launch(argv: Sequence[str] | None = None) -> None:
    """``grpo-seq launch [accelerate launch options] SCRIPT [its options]``."""
    from accelerate.commands.launch import launch_command, launch_command_parser
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    parser = launch_command_parser()
    parser.prog = "grpo-seq launch"
    args = parser.parse_args(None if argv is None else list(argv))
    _fill_defaults(args)
    # torchrun's failure report repeats, at length, what the failed program said in one line
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    try:
        launch_command(args)
    except subprocess.CalledProcessError as e:
        raise SystemExit(e.returncode) from None
    except ChildFailedError as e:
        raise SystemExit(_exit_status(e)) from None
