"""``GRPO.save(path)`` / ``GRPO.load(path)``: one zip file, safetensors and JSON inside, no pickle.

The zip holds ``model.safetensors`` and ``policy.json`` (as :func:`grpo_seq.save_policy` writes
them) and ``grpo.json`` (the constructor's JSON-able arguments, the env id where there is one,
``num_timesteps``). As in SB3, a path without a suffix gets ``.zip``; the file is written
atomically (:func:`grpo_seq.serialization.atomic_file`), so a reader never sees half of it. The
optimizer's moments are not saved: training after ``load`` starts Adam afresh.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import nn

from ..errors import MissingPathError, UsageError
from ..serialization import atomic_file

__all__ = ["zip_path", "write_model_zip", "read_model_zip"]


def zip_path(path: str | os.PathLike, must_exist: bool = False) -> Path:
    """``path`` with ``.zip`` added when it has no suffix (SB3's rule); for reading, either spelling."""
    path = Path(path)
    if must_exist:
        for p in (path, Path(f"{path}.zip")):
            if p.is_file():
                return p
        raise MissingPathError(f"GRPO.load: {path} not found (nor {path}.zip): give a file written by GRPO.save")
    return path if path.suffix else Path(f"{path}.zip")


def write_model_zip(path: str | os.PathLike, policy: nn.Module, policy_json: dict, meta: dict[str, Any]) -> Path:
    """Write the zip of :func:`read_model_zip` to ``path`` (``.zip`` added without a suffix),
    atomically (:func:`grpo_seq.serialization.atomic_file`)."""
    path = zip_path(path)
    state = {k: v.detach().contiguous().cpu() for k, v in policy.state_dict().items()}
    with atomic_file(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("model.safetensors", save_tensors(state))
        z.writestr("policy.json", json.dumps(policy_json, indent=2))
        z.writestr("grpo.json", json.dumps(meta, indent=2))
    return path


def read_model_zip(path: str | os.PathLike) -> tuple[dict, dict, dict]:
    """``(tensors, policy_json, grpo_json)`` of a file written by :func:`write_model_zip`."""
    path = zip_path(path, must_exist=True)
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            missing = {"model.safetensors", "policy.json", "grpo.json"} - names
            if missing:
                raise UsageError(f"GRPO.load: {path} lacks {', '.join(sorted(missing))}: not a file written by "
                                 "GRPO.save (a Stable-Baselines3 zip holds pickled objects, which are not read)")
            tensors = load_tensors(z.read("model.safetensors"))
            return tensors, json.loads(z.read("policy.json")), json.loads(z.read("grpo.json"))
    except zipfile.BadZipFile:
        raise UsageError(f"GRPO.load: {path} is not a zip file written by GRPO.save") from None
