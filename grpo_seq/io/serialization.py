"""Saving and loading policies as safetensors, written atomically."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from .disk import file_size_limit
from ..errors import MissingPathError, UsageError
from ..policies import CategoricalMLPPolicy

__all__ = [
    "save_policy", "load_policy", "load_policy_weights", "atomic_dir", "atomic_file", "atomic_write_text", "link_folder",
    "writer_os_error",
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
    never a half-written one, whatever moment a kill comes; and where a folder is replaced, a
    reader never finds ``path`` missing (:func:`_publish`). The only way this package writes a
    folder (policies, checkpoints). A full disk or a file over the size limit, however the writer
    reports it (torch's zip writer, safetensors), leaves as ``OSError`` ENOSPC or EFBIG naming
    the file or folder (:func:`writer_os_error`)."""
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
    except BaseException as e:
        as_os = writer_os_error(e, tmp, path)
        shutil.rmtree(tmp, ignore_errors=True)
        if as_os is None or as_os is e:
            raise
        raise as_os from e
    _publish(tmp, path)
    _fsync_dir(path.parent)  # make the rename itself durable


def _publish(tmp: Path, path: Path) -> None:
    """Put the folder ``tmp`` at ``path``. An existing ``path`` (the same checkpoint step saved
    twice, a policy saved again) is swapped with ``tmp`` in one atomic step (renameat2's
    RENAME_EXCHANGE), so a reader opening ``path`` at any moment finds the old folder or the new,
    never nothing; the old one, now at ``tmp``, is then removed. Where the exchange is not
    available (not Linux, a filesystem refusing it) two renames do it, with a moment between them."""
    if not os.path.lexists(path):
        os.replace(tmp, path)
        return
    if _exchange(tmp, path):
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


@functools.lru_cache(maxsize=1)
def _renameat2() -> Callable[..., int] | None:
    """libc's ``renameat2`` (Linux, glibc 2.28 or later), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _exchange(a: Path, b: Path) -> bool:
    """Swap the entries ``a`` and ``b`` atomically; False (nothing done) where the system or the
    filesystem cannot, so the caller falls back to renames. Any other failure raises."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


# How writers say "the disk is full" or "the file is over the size limit" without an OSError.
_NO_SPACE_TEXT = ("no space left", "os error 28")
_TOO_LARGE_TEXT = ("file too large", "os error 27")
_TORCH_WRITE_TEXT = ("unexpected pos", "file write failed")  # torch.save's zip writer, whatever the cause


def writer_os_error(e: BaseException, tmp: Path, path: Path) -> OSError | None:
    """The ``OSError`` (ENOSPC or EFBIG) that ``e``, raised while writing ``tmp`` (to become
    ``path``), stands for; None when it is no such error. torch.save reports a failed write as a
    ``RuntimeError`` ("unexpected pos", without the cause) and safetensors as a ``SafetensorError``
    ("os error 28"): recognised here, so a full disk is told as one, with the resume command,
    rather than as a writer's traceback. The file named is where it will be (under ``path``)."""
    if isinstance(e, OSError):
        code = e.errno if e.errno in (errno.ENOSPC, errno.EFBIG) else None
    elif isinstance(e, Exception):
        text = str(e).lower()
        code = errno.EFBIG if any(t in text for t in _TOO_LARGE_TEXT) else \
            errno.ENOSPC if any(t in text for t in _NO_SPACE_TEXT + _TORCH_WRITE_TEXT) else None
    else:
        code = None
    if code is None:
        return None
    oversized = _oversized(tmp)
    if oversized is not None:  # a file reached the size limit: that, not a full disk, stopped the write
        code = errno.EFBIG
    name = _final_name(e.filename if isinstance(e, OSError) else None, tmp, path, oversized)
    if isinstance(e, OSError) and e.errno == code:
        e.filename = name
        return e
    return OSError(code, os.strerror(code), name)


def _oversized(tmp: Path) -> Path | None:
    """The file under ``tmp`` that reached this process's file-size limit, if any."""
    limit = file_size_limit()
    if limit is None:
        return None
    for f in [tmp] if tmp.is_file() else sorted(tmp.rglob("*")):
        if f.is_file() and f.stat().st_size >= limit:
            return f
    return None


def _final_name(filename: str | None, tmp: Path, path: Path, oversized: Path | None) -> str:
    """Where the file that failed will be once published: under ``path`` rather than ``tmp``."""
    name = Path(filename) if filename else oversized or tmp
    try:
        return str(path / name.relative_to(tmp))
    except ValueError:  # not under tmp: already a final name
        return str(name)


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
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would outlive the rename: the file reads as open() makes it
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        as_os = writer_os_error(e, tmp, path)
        tmp.unlink(missing_ok=True)
        if as_os is None or as_os is e:
            raise
        raise as_os from e
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
    kwargs = cfg.get("kwargs")
    if not isinstance(kwargs, dict):
        raise UsageError(f"{cfg_path}: no \"kwargs\" mapping (the policy's constructor arguments); save the policy again")
    try:
        policy = _POLICY_CLASSES[name](**kwargs)
    except (TypeError, ValueError) as e:
        raise UsageError(f"{cfg_path}: its kwargs do not make a {name} ({' '.join(str(e).split())})") from None
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
        weights = load_file(str(weights_path))
    except (SafetensorError, OSError) as e:  # cut short, or not safetensors at all
        raise UsageError(f"{weights_path}: damaged, cannot be read ({' '.join(str(e).split())}); save the policy "
                         "again, or use a checkpoint's copy") from None
    try:
        policy.load_state_dict(weights)
    except RuntimeError as e:
        raise UsageError(f"{weights_path} does not fit this {type(policy).__name__} (another architecture?): {e}") from None
