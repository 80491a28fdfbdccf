"""``GRPO.save(path)`` / ``GRPO.load(path)``: one zip file, safetensors and JSON inside, no pickle.

The zip holds ``model.safetensors`` and ``policy.json`` (as :func:`grpo_seq.save_policy` writes
them), ``grpo.json`` (the constructor's JSON-able arguments, the env id where there is one,
``num_timesteps``) and ``data``: Stable-Baselines3's JSON entry of the model's attributes, which
SB3's tools read. What SB3 would pickle there (a function, a schedule) is written as its type and
``":not_serialized:"`` naming why, and comes back only through ``custom_objects``. ``path`` may be
a file object (written or read in place, left open). As in SB3, a path without a suffix gets ``.zip``; the file is written
atomically (:func:`grpo_seq.io.serialization.atomic_file`), so a reader never sees half of it. The
optimizer's moments are not saved: training after ``load`` starts Adam afresh.

The env's last observation (SB3's ``_last_obs``, kept for ``load(..., force_reset=False)``) is
``last_obs.safetensors``, one tensor per observation part: an Atari frame stack's would be
megabytes as JSON.

``grpo.json`` names the format, ``"grpo-seq GRPO <version>"``; a file of another format or of a
newer version is refused, as is a damaged one (cut short, a member missing or unreadable, JSON
that does not parse) and one whose weights do not fit the policy ``policy.json`` describes: each
a :class:`SavedModelError`, one line naming the file (and the member).
"""

from __future__ import annotations

import io
import json
import os
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import Tensor, nn

from ..errors import MissingPathError, UsageError
from ..policies.mlp import CategoricalMLPPolicy
from ..io.serialization import atomic_file

__all__ = ["FORMAT", "SavedModelError", "zip_path", "write_model_zip", "read_model_zip", "build_policy", "read_data",
           "read_last_obs"]

# 2: a Box of one bound is saved as two numbers and its shape; the last observation as safetensors
FORMAT_NAME, FORMAT_VERSION = "grpo-seq GRPO", 2
FORMAT = f"{FORMAT_NAME} {FORMAT_VERSION}"  # grpo.json's "format": what GRPO.save writes, the newest this reads
MEMBERS = ("model.safetensors", "policy.json", "grpo.json")
LAST_OBS = "last_obs.safetensors"
# The most a member may hold, uncompressed, before it is read: a policy's JSON is a few hundred
# bytes and an SB3-sized MLP's weights a few megabytes; a file declaring more is refused before
# anything is allocated (a zip member can expand a thousandfold).
MAX_JSON_BYTES = 1 << 20
MAX_WEIGHTS_BYTES = 4 << 30
# what GRPO.load reads of grpo.json, and the type it needs (None: any)
_META_KEYS = {"num_timesteps": int, "seed": None, "group_mode": None, "horizon": None, "max_episode_steps": None,
              "config": dict}


class SavedModelError(UsageError):
    """A file ``GRPO.load`` cannot use: damaged, of another format or version, or holding weights
    that do not fit the policy it describes. The message is one line naming the file. A
    ``ValueError``, as Stable-Baselines3's ``load`` raises for a file that is not its zip."""


def _is_file_object(path: Any) -> bool:
    return isinstance(path, io.IOBase) or hasattr(path, "read") or hasattr(path, "write")


def zip_path(path: Any, must_exist: bool = False) -> Any:
    """``path`` with ``.zip`` added when it has no suffix (SB3's rule); for reading, either
    spelling. A file object is returned as it is."""
    if _is_file_object(path):
        return path
    path = Path(path)
    if must_exist:
        for p in (path, Path(f"{path}.zip")):
            if p.is_file():
                return p
        raise MissingPathError(f"GRPO.load: {path} not found (nor {path}.zip): give a file written by GRPO.save")
    return path if path.suffix else Path(f"{path}.zip")


def write_model_zip(path: Any, policy: nn.Module, policy_json: dict, meta: dict[str, Any],
                    data: dict[str, Any] | None = None, last_obs: dict[str, Any] | None = None) -> Any:
    """Write the zip of :func:`read_model_zip` to ``path`` (``.zip`` added without a suffix),
    atomically (:func:`grpo_seq.io.serialization.atomic_file`); or into a file object, left open.
    ``last_obs``: named numpy arrays, written as ``last_obs.safetensors``."""
    path = zip_path(path)
    state = {k: v.detach().contiguous().cpu() for k, v in policy.state_dict().items()}
    members = {"data": json.dumps(data or {}, indent=4), "model.safetensors": save_tensors(state),
               "policy.json": json.dumps(policy_json, indent=2), "grpo.json": json.dumps(meta, indent=2)}
    if last_obs is not None:
        members[LAST_OBS] = save_tensors({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in last_obs.items()})
    if _is_file_object(path):
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for name, content in members.items():
                z.writestr(name, content)
        return path
    with atomic_file(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in members.items():
            z.writestr(name, content)
    return path


def read_data(path: Any) -> dict[str, Any]:
    """The zip's ``data`` entry (Stable-Baselines3's JSON of the model's attributes), ``{}`` without
    one or with one larger than :data:`MAX_JSON_BYTES`."""
    path = zip_path(path, must_exist=True)
    try:
        with zipfile.ZipFile(path) as z:
            if "data" not in z.namelist() or z.getinfo("data").file_size > MAX_JSON_BYTES:
                return {}
            return json.loads(z.read("data"))
    except (zipfile.BadZipFile, EOFError, ValueError):
        return {}


def read_last_obs(path: Any) -> dict[str, np.ndarray]:
    """The named arrays of ``last_obs.safetensors`` (:func:`write_model_zip`)."""
    path = zip_path(path, must_exist=True)
    with zipfile.ZipFile(path) as z:
        if LAST_OBS not in z.namelist():
            raise SavedModelError(f"GRPO.load: {path} lacks {LAST_OBS}, which its grpo.json names: damaged")
        return {k: v.numpy() for k, v in _member(path, z, LAST_OBS, load_tensors).items()}


def read_model_zip(path: Any) -> tuple[dict, dict, dict]:
    """``(tensors, policy_json, grpo_json)`` of a file written by :func:`write_model_zip`, its
    format checked first (:func:`check_format`); :class:`SavedModelError` for a damaged file."""
    path = zip_path(path, must_exist=True)
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, EOFError):
        raise SavedModelError(f"GRPO.load: {path} is not a zip file written by GRPO.save (or is cut short: save it "
                              "again): the file wasn't a zip-file") from None  # the last words are SB3's
    with z:
        missing = [name for name in MEMBERS if name not in set(z.namelist())]
        if missing:
            raise SavedModelError(f"GRPO.load: {path} lacks {', '.join(missing)}: not a file written by GRPO.save "
                                  "(a Stable-Baselines3 zip holds pickled objects, which are not read), or damaged")
        meta = _member(path, z, "grpo.json", _json_object)
        check_format(path, meta)
        policy_json = _member(path, z, "policy.json", _json_object)
        if not isinstance(policy_json.get("class"), str) or not isinstance(policy_json.get("kwargs"), dict):
            raise SavedModelError(f"GRPO.load: {path}: policy.json needs a 'class' (a name) and 'kwargs' (an object)")
        return _member(path, z, "model.safetensors", load_tensors), policy_json, meta


def _json_object(data: bytes) -> dict:
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"a JSON object expected, found {type(value).__name__}")
    return value


def _member(path: Path, z: zipfile.ZipFile, name: str, parse: Callable[[bytes], Any]) -> Any:
    """Member ``name`` of the zip ``z`` read and parsed; a damaged one, or one larger than its
    limit (:data:`MAX_JSON_BYTES`, :data:`MAX_WEIGHTS_BYTES`), is a :class:`SavedModelError`."""
    limit = MAX_WEIGHTS_BYTES if name.endswith(".safetensors") else MAX_JSON_BYTES
    size = z.getinfo(name).file_size
    if size > limit:
        raise SavedModelError(f"GRPO.load: {path}: member {name} holds {size:,} bytes, over the {limit:,} a saved "
                              "policy's may hold; not a file GRPO.save wrote, or damaged")
    try:
        data = z.read(name)
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise SavedModelError(f"GRPO.load: {path}: member {name} is damaged ({_one_line(e)}); the file changed "
                              "after GRPO.save wrote it: save it again") from None
    try:
        return parse(data)
    except (ValueError, SafetensorError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise SavedModelError(f"GRPO.load: {path}: member {name} cannot be read ({_one_line(e)}); the file "
                              "changed after GRPO.save wrote it: save it again") from None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def check_format(path: str | os.PathLike, meta: dict) -> None:
    """Refuse a ``grpo.json`` of another format or of a newer version than :data:`FORMAT`, and one
    without the fields ``GRPO.load`` reads."""
    fmt = meta.get("format")
    name, _, version = fmt.rpartition(" ") if isinstance(fmt, str) else ("", "", "")
    if name != FORMAT_NAME or not version.isdigit():
        raise SavedModelError(f"GRPO.load: {path} is of format {fmt!r}, not one GRPO.save writes; this grpo-seq "
                              f"reads {FORMAT!r}")
    if int(version) > FORMAT_VERSION:
        raise SavedModelError(f"GRPO.load: {path} is of format {fmt!r}, newer than this grpo-seq reads ({FORMAT!r}): "
                              "it was saved by a later grpo-seq; upgrade grpo-seq to load it")
    wrong = [key for key, kind in _META_KEYS.items() if key not in meta or kind and not isinstance(meta[key], kind)]
    if wrong:
        raise SavedModelError(f"GRPO.load: {path}: grpo.json lacks {', '.join(wrong)} (or holds the wrong type): "
                              "damaged, or not written by GRPO.save")


def build_policy(path: Any, tensors: dict[str, Tensor], policy_json: dict,
                 policy_class: type | None = None) -> nn.Module:
    """The policy ``policy_json`` describes (a :class:`GRPOPolicy` or :class:`CategoricalMLPPolicy`,
    else of ``policy_class``) holding ``tensors``; :class:`SavedModelError` when they do not fit it."""
    from .policy import GRPOPolicy

    name = policy_json["class"]
    own = {c.__name__: c for c in (GRPOPolicy, CategoricalMLPPolicy)}
    if name in own:
        try:  # first without memory (the meta device): the sizes policy.json declares must be the weights'
            with torch.device("meta"):
                shapes = own[name](**policy_json["kwargs"])
        except (TypeError, ValueError, RuntimeError) as e:
            raise SavedModelError(f"GRPO.load: {path}: policy.json's kwargs do not make a {name} ({_one_line(e)})") \
                from None
        misfits = _misfits(shapes, tensors)
        if misfits:
            raise SavedModelError(f"GRPO.load: {path}: the weights in model.safetensors do not fit the {name} "
                                  f"policy.json describes: {misfits}; the members come from different saves, or "
                                  "were changed")
        policy = own[name](**policy_json["kwargs"])
    elif policy_class is not None:
        policy = policy_class(**policy_json["kwargs"])
    else:
        raise UsageError(f"GRPO.load: {path} holds a {name}; pass custom_objects={{'policy_class': {name}}}")
    misfits = _misfits(policy, tensors)
    if misfits:
        raise SavedModelError(f"GRPO.load: {path}: the weights in model.safetensors do not fit the {name} policy.json "
                              f"describes: {misfits}; the members come from different saves, or were changed")
    policy.load_state_dict(tensors)
    return policy


def _misfits(policy: nn.Module, tensors: dict[str, Tensor]) -> str:
    """How ``tensors`` differ from ``policy``'s own state, by name and shape ('' when they fit)."""
    own = policy.state_dict()
    found = [f"{k} missing" for k in own if k not in tensors]
    found += [f"{k} is not the policy's" for k in tensors if k not in own]
    found += [f"{k} is {list(tensors[k].shape)}, the policy's {list(v.shape)}" for k, v in own.items()
              if k in tensors and tensors[k].shape != v.shape]
    return "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
