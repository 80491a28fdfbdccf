"""Which folder a job writes into."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["resolve_run_dir", "checkpoints", "resume_command"]


def resolve_run_dir(spec: Any, fresh: str) -> str:
    """The run's folder: ``spec.output_dir``; else, resuming, the folder of the run
    ``spec.resume_from`` names; else ``fresh``. A ``resume_from`` that does not exist, and a
    folder that cannot be made or written (a file, a read-only folder) or that lies inside another
    run's folder, are refused here, before anything is created."""
    from ..io.checkpoint import CheckpointError, run_dir_for
    from ..io.disk import check_output_dir
    from ..io.run_dir import check_not_nested

    if spec.resume_from and not Path(spec.resume_from).expanduser().exists():
        raise CheckpointError(f"--resume_from {spec.resume_from}: no such checkpoint or run folder (nothing was "
                              "created); give the run folder of an earlier run, or one of its checkpoints/step_*")
    folder = spec.output_dir or (str(run_dir_for(spec.resume_from)) if spec.resume_from else fresh)
    option = "--output_dir" if spec.output_dir or not spec.resume_from else "--resume_from"
    check_output_dir(folder, option)
    check_not_nested(folder, option)
    return folder


def checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's complete checkpoint folders, oldest first."""
    from ..io.checkpoint import list_checkpoints

    return list_checkpoints(run_dir)


def resume_command(run_dir: str | Path, argv: list[str] | None = None) -> str:
    """This process's command line with ``--resume_from run_dir`` (any earlier one replaced)."""
    from ..loop.stopping import resume_command as command

    return command(run_dir, argv)
