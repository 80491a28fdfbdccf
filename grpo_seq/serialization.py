"""Saving and loading policies as safetensors, written atomically."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from safetensors.torch import load_file, save_file
from torch import nn

from .errors import MissingPathError, UsageError
from .policies import CategoricalMLPPolicy

__all__ = [
    "save_policy", "load_policy", "load_policy_weights", "atomic_dir", "atomic_file", "atomic_write_text", "link_folder",
]

WEIGHTS_NAME = "model.safetensors"
POLICY_CONFIG_NAME = "policy.json"
_POLICY_CLASSES = {"CategoricalMLPPolicy": CategoricalMLPPolicy}


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, finish: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Write a folder atomically: yields a temporary sibling folder to fill; when the block
    succeeds its files are flushed to disk, ``finish(tmp)`` runs (a checkpoint writes its
    manifest there), and it is renamed over ``path``; when the block raises it is removed and
    ``path`` is untouched. A reader therefore sees the old folder or the complete new one,
    never a half-written one, whatever moment a kill comes. The only way this package writes
    a folder (policies, checkpoints)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would outlive the rename
    try:
        yield tmp
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb+") as fh:
                    os.fsync(fh.fileno())
        if finish is not None:
            finish(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    if path.exists():  # e.g. the same checkpoint step saved twice, or a policy saved again
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(path.parent)  # make the rename itself durable


def link_folder(source: str | os.PathLike, target: str | os.PathLike, link_suffixes: tuple[str, ...] = (".safetensors",)) -> Path:
    """Write ``target`` (atomically) as a copy of the folder ``source`` whose large files, those
    ending in ``link_suffixes``, are hard links to the source's: the same weights on disk once.
    Small files are copied, so editing one never changes the source. Where a hard link is not
    possible (another filesystem), the file is copied."""
    source = Path(source)
    with atomic_dir(target) as tmp:
        for f in sorted(source.rglob("*")):
            dest = tmp / f.relative_to(source)
            if f.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                if not f.name.endswith(link_suffixes):
                    raise OSError("copied, not linked")
                os.link(f, dest)
            except OSError:
                shutil.copy2(f, dest)
    return Path(target)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot sync a directory
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Write a file atomically: yields a temporary sibling's path to write; when the block
    succeeds the file is flushed to disk, renamed over ``path`` and the rename made durable
    (the folder is flushed too); when the block raises it is removed and ``path`` is untouched.
    The only way this package writes a single file that a reader may open at any moment."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through :func:`atomic_file`: the old file or the new, never half."""
    with atomic_file(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def save_policy(policy: nn.Module, directory: str | os.PathLike, **kwargs) -> Path:
    """Write ``model.safetensors`` and ``policy.json`` (class and constructor arguments); a
    policy with a ``save_to`` method (a causal LM) writes its own files, ``kwargs`` passed on.
    """
    name = type(policy).__name__
    if hasattr(policy, "save_to"):  # a transformers model saves itself (save_pretrained)
        with atomic_dir(directory) as tmp:
            policy.save_to(tmp, **kwargs)
        return Path(directory)
    if name not in _POLICY_CLASSES or not hasattr(policy, "init_kwargs"):
        raise TypeError(f"save_policy does not know how to rebuild a {name}; known: {sorted(_POLICY_CLASSES)}")
    state = {k: v.detach().contiguous().cpu() for k, v in policy.state_dict().items()}
    with atomic_dir(directory) as tmp:
        save_file(state, str(tmp / WEIGHTS_NAME))
        (tmp / POLICY_CONFIG_NAME).write_text(json.dumps({"class": name, "kwargs": policy.init_kwargs}, indent=2))
    return Path(directory)


def load_policy(directory: str | os.PathLike) -> nn.Module:
    """Rebuild a policy saved by :func:`save_policy` (weights through safetensors only)."""
    directory = Path(directory)
    cfg_path, weights_path = directory / POLICY_CONFIG_NAME, directory / WEIGHTS_NAME
    for p in (cfg_path, weights_path):
        if not p.is_file():
            raise MissingPathError(f"{p} not found: is {directory} a folder written by save_policy?")
    try:
        cfg = json.loads(cfg_path.read_text())
    except ValueError as e:
        raise UsageError(f"{cfg_path}: not valid JSON ({e})") from None
    name = cfg.get("class") if isinstance(cfg, dict) else None
    if name not in _POLICY_CLASSES:
        raise UsageError(f"{cfg_path}: unknown policy class {name!r}; known: {sorted(_POLICY_CLASSES)}")
    policy = _POLICY_CLASSES[cfg["class"]](**cfg["kwargs"])
    load_policy_weights(policy, directory)
    return policy.eval()


def load_policy_weights(policy: nn.Module, directory: str | os.PathLike) -> None:
    """Load weights written by :func:`save_policy` into an existing ``policy`` of the same shape
    (resuming a checkpoint); a policy with a ``load_from`` method (a causal LM) reads its own files."""
    directory = Path(directory)
    if hasattr(policy, "load_from"):
        policy.load_from(directory)
        return
    weights_path = directory / WEIGHTS_NAME
    if not weights_path.is_file():
        raise MissingPathError(f"{weights_path} not found: is {directory} a folder written by save_policy?")
    cfg_path = directory / POLICY_CONFIG_NAME
    if hasattr(policy, "function_kwargs") and cfg_path.is_file():
        # Weights of the same shapes can still mean another function (an input scale, an activation).
        saved = policy.function_kwargs(json.loads(cfg_path.read_text()).get("kwargs", {}))
        mine = policy.function_kwargs(policy.init_kwargs)
        diff = {k: (saved[k], mine[k]) for k in mine if saved.get(k) != mine[k]}
        if diff:
            raise UsageError(f"{cfg_path}: these weights were trained for another {type(policy).__name__}: "
                             + "; ".join(f"{k} was {a}, is {b} here" for k, (a, b) in diff.items())
                             + " (pass the run's own options, e.g. --obs_scale, when resuming)")
    try:
        policy.load_state_dict(load_file(str(weights_path)))
    except RuntimeError as e:
        raise UsageError(f"{weights_path} does not fit this {type(policy).__name__} (another architecture?): {e}") from None
