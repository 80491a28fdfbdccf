"""The training programs of the command line: options (flags and ``--config FILE``) to a job spec,
run with a progress bar, bad usage as one ``error: ...`` line.

    grpo-seq train-env --env_id Acrobot-v1            # installed command
    python recipes/gym_env.py --env_id Acrobot-v1     # the same program, from a checkout
    grpo-seq train-env --config runs/<run>/config.json --output_dir runs/again   # repeat a run
    accelerate launch --multi_gpu --num_processes 2 recipes/gym_env.py --env_id LunarLander-v3

Options left unset take the env family's defaults (:mod:`grpo_seq.envs.defaults`); every
option is listed by ``--help``. What the runs do and write: :mod:`grpo_seq.jobs.env` and
:mod:`grpo_seq.jobs.lm`.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Mapping, Sequence

from ..jobs.console import Console
from ..jobs.env import run_env_job
from ..jobs.env_spec import EnvJob
from ..jobs.lm import run_lm_job
from ..jobs.lm_spec import LMJob
from ..jobs.text_env import run_text_env_job
from ..jobs.text_env_spec import TextEnvJob
from .errors import NoteRunDir, cli_errors
from .parse import parse_config

__all__ = ["train_env", "train_lm", "train_text_env", "working_folder_importable", "quiet_libraries"]


def working_folder_importable() -> None:
    """Reward functions and envs named by import path live beside the user, as with ``python -m``:
    put the working folder first on ``sys.path`` (a program owns its process)."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


def quiet_libraries() -> None:
    """The libraries' own progress bars (loading weights, converting GGUF tensors, writing shards)
    say nothing a user acts on; the program says what it loads (a program owns its process)."""
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    disable_progress_bars()
    transformers_logging.disable_progress_bar()


def train_env(argv: list[str] | None = None) -> dict[str, Any]:
    """``grpo-seq train-env`` (``argv``, default ``sys.argv[1:]``): train, evaluate and save one run.

    Changes the whole process, as a script's entry point may: seeds the global python, numpy and
    torch RNGs and sets torch's thread count."""
    working_folder_importable()
    with cli_errors():
        return run_env_job(parse_config(EnvJob, argv), [NoteRunDir(), Console()])


def train_lm(argv: list[str] | None = None, cls: type[LMJob] = LMJob,
             reward_funcs: Callable[[Any], Sequence[Any]] | None = None,
             registry: Mapping[str, Callable] | None = None, label: str = "lm") -> dict[str, Any]:
    """``grpo-seq train-lm`` (``argv``, default ``sys.argv[1:]``), or a recipe's program: its spec
    class ``cls`` (an :class:`LMJob` with a task's defaults), ``reward_funcs(spec)`` building its
    reward functions, a ``registry`` of short names and the run folder's ``label``."""
    working_folder_importable()
    quiet_libraries()
    with cli_errors():
        spec = parse_config(cls, argv)
        fns = reward_funcs(spec) if reward_funcs is not None else None
        return run_lm_job(spec, [NoteRunDir(), Console()], reward_funcs=fns, registry=registry, label=label)


def train_text_env(argv: list[str] | None = None, cls: type[TextEnvJob] = TextEnvJob, label: str = "text_env") -> dict[str, Any]:
    """``grpo-seq train-text-env`` (``argv``, default ``sys.argv[1:]``), or a recipe's program with its
    spec class ``cls`` (a :class:`TextEnvJob` with its defaults): a language model trained in a text
    environment, named by ``--env_id`` (a module of the working folder imports by ``module:Env-v0``)."""
    working_folder_importable()
    quiet_libraries()
    with cli_errors():
        return run_text_env_job(parse_config(cls, argv), [NoteRunDir(), Console()], label=label)
