"""``grpo-seq train-agent``: an agent program written against the ``openai`` package, trained
through the policy's endpoint (:mod:`grpo_seq.jobs.agent`).

    grpo-seq train-agent --model MODEL --rollout mypkg.agent:rollout --dataset items.jsonl
    python recipes/agent.py                                   # the calculator agent of examples/agent/

Its own module so that the other programs load nothing of the agents' job.
"""

from __future__ import annotations

from typing import Any

from ..jobs.agent import run_agent_job
from ..jobs.agent_spec import AgentJob
from ..jobs.console import Console
from .errors import NoteRunDir, cli_errors
from .parse import parse_config
from .programs import quiet_libraries, working_folder_importable

__all__ = ["train_agent"]


def train_agent(argv: list[str] | None = None, cls: type[AgentJob] = AgentJob, label: str = "agent") -> dict[str, Any]:
    """``grpo-seq train-agent`` (``argv``, default ``sys.argv[1:]``), or a recipe's program with its
    spec class ``cls`` (an :class:`AgentJob` with its defaults): the rollout function named by
    ``--rollout`` (a module of the working folder imports by ``module:function``), trained."""
    working_folder_importable()
    quiet_libraries()
    with cli_errors():
        return run_agent_job(parse_config(cls, argv), [NoteRunDir(), Console()], label=label)
