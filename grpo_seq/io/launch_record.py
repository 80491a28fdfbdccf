"""What a launcher switched on for a run, recorded beside its options in the run folder's
``config.json``: ``accelerate launch --mixed_precision bf16`` (or ``ACCELERATE_MIXED_PRECISION``)
autocasts every forward pass, and nothing in the job's own options shows it."""

from __future__ import annotations

from typing import Any

__all__ = ["LAUNCH_KEY", "launch_record"]

# Not an option of the job: reading a config.json back as a spec skips this key.
LAUNCH_KEY = "launch"


def launch_record(accelerator: Any) -> dict[str, Any]:
    """``{"launch": {mixed_precision, num_processes, distributed_type, device}}`` of ``accelerator``."""
    kind = accelerator.distributed_type
    return {LAUNCH_KEY: {"mixed_precision": str(accelerator.mixed_precision),
                         "num_processes": int(accelerator.num_processes),
                         "distributed_type": str(getattr(kind, "value", kind)),
                         "device": str(accelerator.device)}}
