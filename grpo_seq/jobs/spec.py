"""A job spec: one serialisable description of a training run, the same for every door.

A spec is a config dataclass (:class:`grpo_seq.LoopConfig` and the fields of its kind of run)
that names its kind (``"env"``, ``"lm"``). It is flat on purpose: one option has one name, whether
it is a command-line flag, a key of a YAML or JSON file, an argument of the Stable-Baselines3
class or a field of an HTTP body. Its ``__post_init__`` is the one place that validates it.

    spec = EnvJob(env_id="Acrobot-v1", seed=3)
    save_spec(spec, "acrobot.yaml")              # or .json: a run folder's config.json is one
    assert load_spec("acrobot.yaml") == spec

:func:`spec_from_dict` checks every key and the type of every value before the dataclass sees
them, naming the source (a file and the key, or a door's argument) in one ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, Mapping

from ..io.launch_record import LAUNCH_KEY
from ..errors import ConfigError

__all__ = ["JobSpec", "spec_class", "spec_from_dict", "spec_to_dict", "load_spec", "save_spec", "read_mapping",
           "coerce_values", "check_threads"]

_KINDS: dict[str, type] = {}
# where each kind's spec class lives, imported on first use: reading an env spec loads no LM code
_KIND_MODULES = {"env": "grpo_seq.jobs.env_spec", "lm": "grpo_seq.jobs.lm_spec",
                 "text_env": "grpo_seq.jobs.text_env_spec", "agent": "grpo_seq.jobs.agent_spec"}


def check_threads(spec: Any, name: str = "torch_threads") -> None:
    """Refuse a thread count no machine has: OpenMP crashes (a segfault, no message) when asked for
    millions. The bound is generous (four per core, at least 1024) so a spec moves between machines."""
    import os

    bound = max(1024, 4 * (os.cpu_count() or 1))
    if getattr(spec, name) > bound:
        raise ConfigError(f"--{name}: must be at most {bound} (4 per core of this machine, or 1024), "
                          f"got {getattr(spec, name)!r}")


class JobSpec:
    """Mixin of every spec class: its ``KIND`` and its dict form, ``{"kind": KIND, **fields}``."""

    KIND: ClassVar[str] = ""
    # the options a newcomer sets first: ``--help`` names them before the full list
    FIRST_OPTIONS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.KIND and cls.KIND not in _KINDS:  # a recipe's subclass keeps the kind it runs as
            _KINDS[cls.KIND] = cls

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, **dataclasses.asdict(self)}  # type: ignore[call-overload]


def spec_class(kind: Any, source: str) -> type:
    """The spec class of ``kind`` (``"env"``, ``"lm"``); ``source`` names where the kind was read."""
    if kind in _KIND_MODULES and kind not in _KINDS:
        import importlib

        importlib.import_module(_KIND_MODULES[kind])
    if kind not in _KINDS:
        raise ConfigError(f"{source}: kind {kind!r} is not a kind of job; one of {sorted(_KIND_MODULES)}")
    return _KINDS[kind]


def spec_to_dict(spec: Any) -> dict[str, Any]:
    """``spec`` as plain JSON-able data, its kind first."""
    return spec.to_dict()


def spec_from_dict(data: Mapping[str, Any], cls: type | None = None, source: str = "spec") -> Any:
    """The spec ``data`` describes: of class ``cls``, else of the class its ``kind`` names.

    Raises :class:`ConfigError` naming ``source`` for a kind that does not fit, an unknown key
    or a value of the wrong type; the spec's own checks then run as it is built."""
    kind = data.get("kind")
    if cls is None:
        cls = spec_class(kind, source)
    elif kind is not None and kind != getattr(cls, "KIND", kind):
        raise ConfigError(f"{source}: holds a {kind!r} job, and this program runs {cls.KIND!r} jobs")
    values = coerce_values(cls, {k: v for k, v in data.items() if k not in ("kind", LAUNCH_KEY)}, source)
    return cls(**values)


def coerce_values(cls: type, data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``data`` checked against ``cls``'s fields: every key a field, every value of the field's
    type (an int where a float is wanted becomes a float). Raises :class:`ConfigError`."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{source}: unknown option(s) {unknown}; the options are {sorted(names)}")
    hints = typing.get_type_hints(cls)  # the annotations themselves: a parser may have rewritten Field.type
    return {k: _coerce(k, hints[k], v, source) for k, v in data.items()}


_SCALARS = (bool, int, float, str)
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _coerce(name: str, hint: Any, value: Any, source: str) -> Any:
    """``value`` as the type ``hint`` names (``int``, ``float | None``, ``list[str]``, ...)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if value is None and type(None) in options:
        return None
    for t in options:
        if typing.get_origin(t) is list and isinstance(value, (list, tuple)):
            inner = (typing.get_args(t) or (object,))[0]
            items = [_scalar(inner, v) for v in value]
            if all(ok for ok, _ in items):
                return [v for _, v in items]
        elif t in _SCALARS:
            ok, converted = _scalar(t, value)
            if ok:
                return converted
    if not any(t in _SCALARS or typing.get_origin(t) is list for t in options):
        return value  # a type this check does not know: the dataclass checks it
    raise ConfigError(f"{source}: option {name!r} takes {_type_name(hint)}, got {excerpt(value)}")


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " | ".join(_type_name(t) for t in typing.get_args(hint))
    if typing.get_origin(hint) is list:
        return f"list[{_type_name((typing.get_args(hint) or (object,))[0])}]"
    return "None" if hint is type(None) else getattr(hint, "__name__", str(hint))


def _scalar(t: Any, value: Any) -> tuple[bool, Any]:
    if t is bool:
        return isinstance(value, bool), value
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if t is float:
        # PyYAML reads 1e-3 (no dot: YAML 1.1) as a string; a number written so is still a number
        if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            return True, float(value)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if t is str:
        return isinstance(value, str), value
    return True, value


# A spec file is a few kilobytes of options: these bounds refuse a file that would take the
# loader's memory or time instead (a "billion laughs" of nested YAML aliases is a few hundred bytes).
MAX_SPEC_BYTES = 1 << 20
MAX_SPEC_NODES = 100_000  # values after aliases are expanded
MAX_EXCERPT = 80  # characters of a value an error message shows


def excerpt(value: Any) -> str:
    """``repr(value)`` cut to :data:`MAX_EXCERPT` characters, for an error message."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for repr (Python's digit limit)
        text = f"<an integer of more than {sys.get_int_max_str_digits()} digits>"
    return text if len(text) <= MAX_EXCERPT else text[:MAX_EXCERPT - 3] + "..."


def read_mapping(path: str | Path, source: str | None = None) -> dict[str, Any]:
    """The mapping a YAML or JSON file holds (JSON is YAML). Raises :class:`ConfigError` naming
    the file for an unreadable file, one over :data:`MAX_SPEC_BYTES` or not UTF-8, invalid YAML,
    aliases expanding past :data:`MAX_SPEC_NODES` values, nesting too deep to read, a key given
    twice (with its lines), a key that is not a string, or a document that is not a mapping; an
    empty file is ``{}``."""
    import yaml

    path = Path(path).expanduser()
    where = source or str(path)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{where}: cannot read it ({e.strerror or e})") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise ConfigError(f"{where}: over {MAX_SPEC_BYTES >> 20} MiB; a spec file holds options, not data")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not UTF-8 text (byte {e.start})") from None
    try:
        data = _load_bounded(text, yaml)
    except _DuplicateKey as e:
        raise ConfigError(f"{where}: {e}; keep one of them") from None
    except _TooLarge as e:
        raise ConfigError(f"{where}: {e}") from None
    except RecursionError:
        raise ConfigError(f"{where}: values nested too deeply to read") from None
    except ValueError as e:  # a constructor's refusal, such as an integer past Python's digit limit
        raise ConfigError(f"{where}: a value cannot be read ({excerpt(str(e))[1:-1]})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML ({excerpt(str(e))[1:-1]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of option: value, got a {type(data).__name__}")
    odd = [k for k in data if not isinstance(k, str)]
    if odd:
        raise ConfigError(f"{where}: option names are strings; got {excerpt(odd[0])}")
    return data


def _load_bounded(text: str, yaml: Any) -> Any:
    """One YAML document, refused before it is built when its aliases expand past
    :data:`MAX_SPEC_NODES` values."""
    loader = _unique_key_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, {})
        if size > MAX_SPEC_NODES:
            raise _TooLarge(f"its aliases expand to more than {MAX_SPEC_NODES:,} values; a spec file holds options")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(node: Any, seen: dict[int, int]) -> int:
    """The values ``node`` stands for once every alias is expanded (each shared node counted once
    per use, its own size computed once)."""
    if id(node) in seen:
        return seen[id(node)]
    seen[id(node)] = 1  # a node that contains itself counts once
    children = node.value if isinstance(node.value, list) else []
    total = 1
    for child in children:
        for part in (child if isinstance(child, tuple) else (child,)):
            total += _expanded_size(part, seen)
            if total > MAX_SPEC_NODES:
                break
    seen[id(node)] = total
    return total


def load_spec(path: str | Path, cls: type | None = None) -> Any:
    """The spec a YAML or JSON file holds (a run folder's ``config.json`` is one)."""
    return spec_from_dict(read_mapping(path), cls, source=str(path))


def save_spec(spec: Any, path: str | Path) -> Path:
    """Write ``spec`` atomically: YAML for a ``.yaml``/``.yml`` path, else JSON."""
    from ..io.serialization import atomic_write_text

    data = spec_to_dict(spec)
    if Path(path).suffix in (".yaml", ".yml"):
        import yaml

        text = yaml.safe_dump(data, sort_keys=False)
    else:
        text = json.dumps(data, indent=2)
    return atomic_write_text(path, text)


class _DuplicateKey(Exception):
    pass


class _TooLarge(Exception):
    pass


def _unique_key_loader() -> type:
    """A safe YAML loader that refuses a mapping with the same key twice (PyYAML keeps the last
    silently, so an option given twice in a file would lose one of its values)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                if isinstance(key, (str, int, float, bool)) and key in seen:
                    raise _DuplicateKey(f"option {key!r} is given twice (lines {seen[key]} and {line})")
                if isinstance(key, (str, int, float, bool)):
                    seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader
