"""Training checkpoints: written atomically, verified on load, the newest complete one found.

A checkpoint is a folder ``<output_dir>/checkpoints/step_XXXXXXXX/`` holding

* ``policy/``: the policy's weights in safetensors (a language model as ``save_pretrained``
  writes it, only the adapter under LoRA);
* ``ref_policy.safetensors``: the reference policy, only when it moves (``ref_sync_steps``);
* ``optimizer.pt``: the optimizer state (tensors and numbers only: loaded with
  ``torch.load(weights_only=True)``);
* ``trainer_state.json``: step and env-step counters, the config, the recipe's own state;
* ``rng_state_<rank>.json``: every RNG of that process (python, numpy, torch, the trainer's
  shuffling generator) and its sampler's position;
* ``manifest.json``, written last: the size and SHA-256 of every other file.

It is written through :func:`grpo_seq.io.serialization.atomic_dir` (a hidden temporary folder,
flushed to disk, the manifest written last, then renamed into place), so a kill at any moment
leaves either no new checkpoint or a complete one. A checkpoint damaged
afterwards (a truncated copy, a full disk) fails its manifest check and is refused by name;
resuming from a run folder then falls back to the newest checkpoint that passes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .disk import check_free_space
from ..errors import UsageError
from .serialization import atomic_dir, load_policy_weights, save_policy

__all__ = [
    "CheckpointError", "CHECKPOINTS_DIR", "MANIFEST_NAME", "checkpoint_dir", "list_checkpoints", "resolve_checkpoint",
    "verify_checkpoint", "write_manifest", "write_checkpoint", "load_checkpoint", "rotate_checkpoints", "run_dir_of",
    "run_dir_for", "rng_state", "set_rng_state", "generator_state", "set_generator_state", "read_json", "write_json",
    "checkpoint_bytes",
]

logger = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"
MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
_STEP_RE = re.compile(r"^step_(\d+)$")


class CheckpointError(UsageError):
    """A checkpoint is missing, incomplete or damaged; the message names the file."""


def checkpoint_dir(output_dir: str | os.PathLike, step: int) -> Path:
    return Path(output_dir) / CHECKPOINTS_DIR / f"step_{step:08d}"


def run_dir_of(checkpoint: Path) -> Path:
    """The run folder a checkpoint belongs to (``<run>/checkpoints/step_X`` -> ``<run>``)."""
    return checkpoint.parent.parent if checkpoint.parent.name == CHECKPOINTS_DIR else checkpoint.parent


def run_dir_for(path: str | os.PathLike) -> Path:
    """The run folder that ``--resume_from`` names: the folder itself, or the run of a checkpoint."""
    path = Path(path).expanduser()
    if path.name == CHECKPOINTS_DIR:
        return path.parent
    if (path / MANIFEST_NAME).exists() or _STEP_RE.match(path.name):
        return run_dir_of(path)
    return path


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The run's checkpoint folders, oldest first (temporary folders of unfinished writes excluded)."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)


def write_manifest(folder: Path, step: int) -> None:
    """Record the size and SHA-256 of every file of ``folder`` in ``manifest.json``."""
    entries = {}
    for f in _files(folder):
        entries[f.relative_to(folder).as_posix()] = {"size": f.stat().st_size, "sha256": _sha256(f)}
    write_json(folder / MANIFEST_NAME, {"format": FORMAT_VERSION, "step": step, "files": entries})


def verify_checkpoint(folder: str | os.PathLike) -> dict:
    """The manifest of a complete, undamaged checkpoint; else :class:`CheckpointError` naming the file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint {folder}: no such folder")
    manifest_path = folder / MANIFEST_NAME
    try:
        manifest = json.loads(manifest_path.read_text())
        entries = [(rel, int(meta["size"]), str(meta["sha256"])) for rel, meta in manifest["files"].items()]
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {folder}: no {MANIFEST_NAME}, so it was never completed") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"checkpoint {folder}: malformed {MANIFEST_NAME} ({type(e).__name__}: {e})") from None
    for rel, size_expected, sha in entries:
        f = folder / rel
        if not isinstance(rel, str) or not f.resolve().is_relative_to(folder.resolve()):
            raise CheckpointError(f"checkpoint {folder}: malformed {MANIFEST_NAME} (it names {rel!r}, outside the folder)")
        if not f.is_file():
            raise CheckpointError(f"checkpoint {folder}: {rel} is missing")
        size = f.stat().st_size
        if size != size_expected:
            raise CheckpointError(f"checkpoint {folder}: {rel} is truncated or altered ({size} bytes, expected {size_expected})")
        if _sha256(f) != sha:
            raise CheckpointError(f"checkpoint {folder}: {rel} is corrupted (its SHA-256 differs from the manifest's)")
    return manifest


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint to resume from: ``path`` itself when it is a checkpoint folder (verified;
    refused with :class:`CheckpointError` when damaged), or the newest checkpoint of the run
    folder ``path`` that passes verification (each damaged newer one is logged and skipped)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"--resume_from {path}: no such checkpoint or run folder")
    if (path / MANIFEST_NAME).exists() or _STEP_RE.match(path.name):
        verify_checkpoint(path)
        return path
    run = path.parent if path.name == CHECKPOINTS_DIR else path
    candidates = list_checkpoints(run)
    if not candidates:
        raise CheckpointError(f"--resume_from {path}: no checkpoints in {run / CHECKPOINTS_DIR}")
    refused = []
    for ckpt in reversed(candidates):
        try:
            verify_checkpoint(ckpt)
        except CheckpointError as e:
            logger.warning("refusing %s; trying the previous checkpoint", e)
            refused.append(str(e))
            continue
        if refused:
            print(f"refused {len(refused)} damaged checkpoint(s): {'; '.join(refused)}; resuming from {ckpt}", flush=True)
        return ckpt
    raise CheckpointError(f"--resume_from {path}: every checkpoint is damaged: {'; '.join(refused)}")


def write_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    *,
    policy: nn.Module,
    optimizer_state: dict[str, Any] | None,
    trainer_state: dict[str, Any],
    rng_states: list[dict[str, Any]],
    ref_policy: nn.Module | None = None,
    keep: int = 0,
) -> Path:
    """Write ``<run_dir>/checkpoints/step_XXXXXXXX/`` atomically, then keep the newest ``keep``
    checkpoints (0: all). ``rng_states`` holds one entry per process (``rng_state_<rank>.json``);
    ``ref_policy`` is saved only when given (a reference that moves), the optimizer state only
    when not None. Call it on one process. A filesystem without room for the checkpoint's tensors
    raises ``OSError(ENOSPC)`` before anything is written."""
    target = checkpoint_dir(run_dir, step)
    check_free_space(target, checkpoint_bytes(policy, optimizer_state, ref_policy), f"checkpoint {target.name}")
    with atomic_dir(target, finish=lambda tmp: write_manifest(tmp, step)) as tmp:
        for rank, rng in enumerate(rng_states):
            write_json(tmp / f"rng_state_{rank}.json", rng)
        save_policy(policy, tmp / "policy", merged=False)
        if ref_policy is not None:
            from safetensors.torch import save_model

            save_model(ref_policy, str(tmp / "ref_policy.safetensors"))
        if optimizer_state is not None:
            torch.save(optimizer_state, tmp / "optimizer.pt")
        write_json(tmp / "trainer_state.json", trainer_state)
    rotate_checkpoints(run_dir, keep)
    return target


def checkpoint_bytes(policy: nn.Module, optimizer_state: dict[str, Any] | None,
                     ref_policy: nn.Module | None = None) -> int:
    """A lower bound of the bytes a checkpoint of these takes: the tensors it saves, each storage
    once (tied weights are saved once), only the trainable ones of a LoRA policy (its checkpoint
    holds the adapter alone). Checked against the free space before a checkpoint is started, so
    a disk too full for it is said before anything is written, never by a half-written file."""
    def trainable(module: nn.Module) -> list[torch.Tensor]:
        if getattr(module, "has_adapters", False):
            return [p for p in module.parameters() if p.requires_grad]
        return list(module.state_dict().values())

    tensors = trainable(policy) + (list(ref_policy.state_dict().values()) if ref_policy is not None else [])
    stack = [optimizer_state.get("state", {})] if isinstance(optimizer_state, dict) else []
    while stack:  # the optimizer's per-parameter state: dicts of tensors and numbers
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            tensors.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    sizes = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            sizes[(t.device, t.data_ptr(), t.dtype, t.shape)] = t.numel() * t.element_size()
    return sum(sizes.values())


def load_checkpoint(
    folder: Path, policy: nn.Module, ref_policy: nn.Module | None = None, process_index: int = 0
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """Load a verified checkpoint folder's weights into ``policy`` (and ``ref_policy`` when the
    checkpoint holds one); returns ``(trainer_state, optimizer_state, rng_state)``, the optimizer
    state None when it was not saved, the RNG state None when the checkpoint has no RNG file for
    ``process_index``. Raises
    :class:`CheckpointError` naming the file that does not fit."""
    state = read_json(folder / "trainer_state.json")
    if isinstance(state, dict) and "tokens_sampled" not in state and "env_steps" in state:
        state["tokens_sampled"] = state.pop("env_steps")  # the counter's name before 0.2
    if not isinstance(state, dict) or not all(isinstance(state.get(k), int) for k in ("step", "tokens_sampled")):
        raise CheckpointError(f"checkpoint {folder}: trainer_state.json has no step and tokens_sampled counters")
    load_policy_weights(policy, folder / "policy")
    ref_file = folder / "ref_policy.safetensors"
    if ref_policy is not None and ref_file.exists():
        from safetensors.torch import load_model

        load_model(ref_policy, str(ref_file))
    optimizer_state = None
    try:
        if (folder / "optimizer.pt").exists():
            optimizer_state = torch.load(folder / "optimizer.pt", map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"checkpoint {folder}: optimizer.pt holds objects other than tensors and numbers, refused "
            f"(only weights_only loading is allowed): {e}"
        ) from None
    rng_file = folder / f"rng_state_{process_index}.json"
    return state, optimizer_state, read_json(rng_file) if rng_file.exists() else None


def rotate_checkpoints(run_dir: str | os.PathLike, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints (``keep`` 0: keep all), and the temporary
    folders of writes that a hard kill interrupted."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if root.is_dir():
        for stale in root.glob(".step_*"):
            shutil.rmtree(stale, ignore_errors=True)
    if keep <= 0:
        return
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


# -- RNG states as JSON (no pickles) -------------------------------------------------------------


def generator_state(gen: torch.Generator) -> list[int]:
    return gen.get_state().tolist()


def set_generator_state(gen: torch.Generator, state: list[int]) -> None:
    gen.set_state(torch.tensor(state, dtype=torch.uint8))


def rng_state() -> dict[str, Any]:
    """The global python, numpy and torch (CPU and CUDA) RNG states, as JSON-able values."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj))


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint file {path}: unreadable ({e})") from None
