"""Reward functions for text: loading them by name, weighting them, checking what they return.

A reward function is any callable with TRL's signature::

    fn(prompts, completions, **columns) -> list[float | None]

called with keyword arguments only: ``prompts`` and ``completions`` (B each; a completion is a
str or a list of chat messages), ``completion_ids`` (B lists of token ids, when the sampler
provides them) and every dataset column (B values each, e.g. ``answer``). It returns one value per
completion; ``None`` means "does not apply to this sample", which leaves that sample to the other
functions (a function may return None for every sample, as in TRL). An ``async`` function is
awaited, all the async functions of a batch concurrently. Each function gets copies of its own: one that edits its arguments changes neither
what the next function scores nor the batch.

:class:`RewardScorer` is the trainer's ``score_fn``: it runs the functions on a
:class:`RolloutBatch`, fills ``batch.rewards`` with their weighted sum and logs each function's
mean. A function that misbehaves raises :class:`RewardFunctionError` naming it, instead of
silently turning into NaN advantages several steps later; so does one that calls ``sys.exit()``
or raises ``KeyboardInterrupt`` itself, in its call or at its module's import.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import math
import numbers
import os
import signal
import threading
from types import FrameType, TracebackType
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ..math.batch import RolloutBatch
from ..errors import UsageError

__all__ = ["RewardFunctionError", "RewardScorer", "load_reward_fn", "reward_name", "check_call", "check_rows"]

class RewardFunctionError(UsageError):
    """A reward function raised or returned something unusable; the message names it."""


def reward_name(fn: Callable) -> str:
    """The name a function is logged under: ``__name__``, a partial's underlying function's name,
    or the class name of a callable object."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) and name else type(fn).__name__


def _check_signature(fn: Callable, what: str) -> None:
    """Fail at load time, not at the first training step, when ``fn`` cannot take the keywords
    ``prompts`` and ``completions`` (e.g. a factory such as ``overlong_penalty`` named by mistake)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins and C callables: nothing to check
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = [k for k in ("prompts", "completions") if k not in named]
    if missing:
        raise RewardFunctionError(
            f"{what} cannot be a reward function: it does not accept the keyword argument(s) "
            f"{', '.join(missing)}; a reward function is called as fn(prompts=..., completions=..., **columns) "
            "(give it **kwargs to ignore what it does not use; if it is a factory, call it and pass the result)"
        )


def load_reward_fn(spec: str | Callable, registry: Mapping[str, Callable] | None = None) -> Callable:
    """The reward function that ``spec`` names.

    Args:
        spec: a callable (returned as is); a short name, a key of ``registry``; an import
            path ``package.module:attr`` or ``package.module.attr`` (the module must be
            importable, e.g. on ``sys.path``; only the named module is imported, nothing is
            evaluated); or a reward model's folder or hub id ``org/name``
            (:func:`grpo_seq.scoring.reward_model.load_reward_model`).
        registry: short name -> reward function, from the caller (a task package's table). The
            library keeps none of its own: without a registry only import paths resolve.

    Raises:
        ValueError: unknown short name (or a short name with no registry), module that cannot be
            imported, missing attribute, or an object that is not a reward function. The message
            lists the registry's short names.
    """
    if callable(spec) and not isinstance(spec, str):
        _check_signature(spec, f"{reward_name(spec)!r}")
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"a reward function is a callable or a name, got {type(spec).__name__}: {spec!r:.80}")

    registry = registry or {}
    hint = _hint(registry)
    name = spec.strip()
    if name in registry:
        return registry[name]
    from .reward_model import is_reward_model_spec, load_reward_model

    if is_reward_model_spec(name):  # a folder or a hub id (org/name): a sequence-classification model
        return load_reward_model(name)
    module_name, attr_path = _split_import_path(spec, name, registry, hint)
    obj = _import_attribute(spec, module_name, attr_path, hint)
    if inspect.isclass(obj) or not callable(obj):
        kind = "a class (create an instance in your module and name that)" if inspect.isclass(obj) else type(obj).__name__
        raise RewardFunctionError(f"reward function {spec!r} is not callable: it is {kind}; {hint}")
    _check_signature(obj, f"{spec!r}")
    return obj


def _hint(registry: Mapping[str, Callable]) -> str:
    """How to name a reward function, ending every error of :func:`load_reward_fn`."""
    if registry:
        return f"use a short name ({', '.join(sorted(registry))}) or an import path like 'package.module:function'"
    return "use an import path like 'package.module:function'"


def _split_import_path(spec: str, name: str, registry: Mapping[str, Callable], hint: str) -> tuple[str, str]:
    """``(module, attribute path)`` of ``package.module:attr`` or ``package.module.attr``."""
    if ":" in name:
        module_name, _, attr_path = name.partition(":")
    elif "." in name:
        module_name, _, attr_path = name.rpartition(".")
    elif not registry:
        raise RewardFunctionError(f"reward function {spec!r} is a short name, and short names need a registry "
                                  f"(load_reward_fn(name, registry=...)); {hint}")
    else:
        raise RewardFunctionError(f"unknown reward function {spec!r}; {hint}")
    if not module_name or not attr_path:
        raise RewardFunctionError(f"reward function {spec!r} is not of the form 'package.module:attr'; {hint}")
    return module_name, attr_path


def _import_attribute(spec: str, module_name: str, attr_path: str, hint: str) -> Any:
    """Import ``module_name`` (only it) and follow the dotted ``attr_path`` inside it."""
    obj: Any = _import_module(spec, module_name, hint)
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RewardFunctionError(f"reward function {spec!r}: {module_name!r} has no attribute {attr_path!r}; {hint}") from None
    return obj


def _import_module(spec: str, module_name: str, hint: str) -> Any:
    """The module of a reward function, imported; whatever its import raises becomes a
    :class:`RewardFunctionError` naming the module. That includes ``sys.exit()`` at import (a
    script's ``argparse`` or ``exit()`` not under ``if __name__ == "__main__":``) and a
    ``KeyboardInterrupt`` of its own, which would otherwise end the program silently with the
    exit's status: exit 2, as for any reward function that cannot be loaded. A Ctrl-C pressed
    during the import still interrupts (:class:`_SigintWatch`)."""
    with _SigintWatch() as sigint:
        try:
            return importlib.import_module(module_name)
        except SystemExit as e:
            raise RewardFunctionError(
                f"reward function {spec!r}: importing {module_name!r} called {_exit_call(e)}"
                f"{_origin(e.__traceback__, module_level=True)}; a module of reward functions must not exit when "
                "imported (put script code under if __name__ == '__main__':)") from e
        except KeyboardInterrupt as e:
            if sigint.received:
                raise
            raise RewardFunctionError(
                f"reward function {spec!r}: importing {module_name!r} raised KeyboardInterrupt"
                f"{_origin(e.__traceback__, module_level=True)}, and no Ctrl-C was pressed; a module of reward "
                "functions must import cleanly (raise an ordinary exception to refuse)") from e
        except ModuleNotFoundError as e:
            raise _not_found(e, spec, module_name, hint) from e
        except Exception as e:
            raise RewardFunctionError(f"reward function {spec!r}: importing {module_name!r} failed: {type(e).__name__}: {e}") from e


def _not_found(e: ModuleNotFoundError, spec: str, module_name: str, hint: str) -> RewardFunctionError:
    """The error of a module not found: the named one (where to run from), or one it imports."""
    if e.name is not None and (module_name == e.name or module_name.startswith(e.name + ".")):
        return RewardFunctionError(
            f"reward function {spec!r}: no module named {module_name!r} in the working folder ({os.getcwd()}) or on "
            f"sys.path; run from the folder that holds {module_name.split('.')[0]}/ (or {module_name.split('.')[0]}.py), "
            f"or add that folder to PYTHONPATH; {hint}"
        )
    # The module exists but something it imports does not: that is the user's bug to see.
    return RewardFunctionError(f"reward function {spec!r}: importing {module_name!r} failed: {type(e).__name__}: {e}")


class _SigintWatch:
    """Within ``with _SigintWatch() as w:``, ``w.received`` turns True when a SIGINT (Ctrl-C) arrives.

    A ``KeyboardInterrupt`` that user code raises itself looks like a Ctrl-C; this tells them
    apart. Python runs a signal's handler in the main thread, so while the block runs every
    SIGINT passes through :meth:`_handle`, which notes it and then calls the handler that was
    there (``GracefulStop``'s: the first Ctrl-C asks for a checkpoint after the step, the second
    raises; or Python's default, which raises). A ``KeyboardInterrupt`` with ``received`` still
    False was raised by the code, not by a Ctrl-C. Outside the main thread, or where no Python
    handler raises on SIGINT (ignored, default action), no Ctrl-C can become a
    ``KeyboardInterrupt`` in the block, so ``received`` stays False as it should."""

    def __init__(self) -> None:
        self.received = False
        self._previous: Callable[[int, FrameType | None], Any] | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = True
        if self._previous is not None:
            self._previous(signum, frame)

    def __enter__(self) -> "_SigintWatch":
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if callable(previous):
                self._previous = previous
                signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            if signal.getsignal(signal.SIGINT) == self._handle:  # unless the block installed its own
                signal.signal(signal.SIGINT, self._previous)
            self._previous = None


def _exit_call(e: SystemExit) -> str:
    """``sys.exit(3)``, ``sys.exit('done')`` or ``sys.exit()``: the call that raised ``e``, as written."""
    return "sys.exit()" if e.code is None else f"sys.exit({e.code!r:.80})"


def _origin(tb: TracebackType | None, module_level: bool = False) -> str:
    """`` (FILE line N)``: where user code raised, the innermost frame of ``tb`` outside this file
    and importlib; with ``module_level``, the innermost module body, i.e. the file whose import
    raised (not the argparse inside it that called ``sys.exit``). '' when no frame qualifies."""
    place = ""
    while tb is not None:
        code = tb.tb_frame.f_code
        if not code.co_filename.startswith("<") and code.co_filename != __file__ \
                and (not module_level or code.co_name == "<module>"):
            place = f" ({code.co_filename} line {tb.tb_lineno})"
        tb = tb.tb_next
    return place


_ATOMS = frozenset({str, bytes, int, float, bool, complex, type(None)})


def _private_copy(value: Any) -> Any:
    """A copy of one reward function's argument that shares nothing mutable with the batch.

    A function that edits what it is given (appends to ``completions``, rewrites a chat message,
    clears a column) would otherwise change what every later function scores and what the
    batch records, and the run would go on with wrong rewards. A list of plain values (the
    common case: text completions) is copied shallowly, as they cannot change; anything else is
    deep-copied."""
    if type(value) is list and all(type(v) in _ATOMS for v in value):
        return list(value)
    return value if type(value) in _ATOMS else copy.deepcopy(value)


def check_call(fn: Callable, name: str, keywords: Sequence[str]) -> None:
    """Refuse (:class:`RewardFunctionError`, naming the function and the keyword) a reward function
    that cannot be called with exactly ``keywords`` (``prompts``, ``completions``,
    ``completion_ids`` and the dataset's columns): one it does not accept, without ``**kwargs``,
    or a parameter of its own without a default that none of them fills."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins and C callables: nothing to check
        return
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        extra = [k for k in keywords if k not in named]
        if extra:
            raise RewardFunctionError(
                f"reward function '{name}' does not accept the keyword argument(s) {', '.join(map(repr, extra))}, "
                f"which it will be called with (the keywords are {', '.join(keywords)}); add **kwargs to its "
                "parameters to ignore what it does not use"
            )
    unfilled = [p.name for p in params if p.default is p.empty and p.name not in keywords
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if unfilled:
        raise RewardFunctionError(
            f"reward function '{name}' needs the argument(s) {', '.join(map(repr, unfilled))}, which no dataset column "
            f"fills (it will be called with {', '.join(keywords)}); add such a column or give the parameter a default"
        )


def check_rows(fns: Sequence[Callable], names: Sequence[str], rows: Any, source: str = "dataset",
               prompt_column: str = "prompt", extra_keywords: Sequence[str] = ()) -> None:
    """Before the first step: every reward function's signature against the keywords it will get
    (:func:`check_call`), and every row against the functions that can check one (a ``check_row``
    attribute: ``fn.check_row(row)`` raises ``ValueError`` for a row it could not score, e.g. a
    gold answer that is not a number). Errors name the function, and the file and line (or row)."""
    from ..io.prompt_data import row_place

    if len(rows) == 0:
        return
    columns = [k for k in rows[0] if k != prompt_column]
    keywords = ["prompts", "completions", "completion_ids", *columns, *extra_keywords]
    for fn, name in zip(fns, names):
        check_call(fn, name, keywords)
    checkers = [(fn.check_row, name) for fn, name in zip(fns, names) if callable(getattr(fn, "check_row", None))]
    for i, row in enumerate(rows if checkers else ()):
        for check, name in checkers:
            try:
                check(row)
            except (ValueError, KeyError, TypeError) as e:
                raise RewardFunctionError(
                    f"{row_place(rows, i, source)}: reward function '{name}' cannot score this row: {e}; fix or drop it"
                ) from None


# The trainer's own reward/... metrics: a function with one of these names gets a suffix.
_RESERVED = {"mean", "std", "group_std", "zero_std_groups"}


def _unique_names(fns: Sequence[Callable]) -> list[str]:
    """Function names, with ``_2``, ``_3``, ... on repeats so each logs under its own metric."""
    names: list[str] = []
    for fn in fns:
        base = name = reward_name(fn)
        k = 2
        while name in names or name in _RESERVED:
            name, k = f"{base}_{k}", k + 1
        names.append(name)
    return names


def _call(fn: Callable, where: str, kwargs: dict[str, Any]) -> Any:
    """``fn(**kwargs)``, whatever it raises turned into a :class:`RewardFunctionError` naming ``where``.

    That includes ``sys.exit()`` and a ``KeyboardInterrupt`` raised by the function itself: left
    alone they end the program with the exit's status (0, 3, 130) and no message, nothing
    trained. Both are the function misbehaving, like one that raises or returns garbage, so they
    end the same way: one ``error:`` line and exit status 2, after the checkpoint of the steps
    done. 2 rather than 1: 1 means the run stopped on its own (NaN gradients, a full disk), 2
    that something the user gave is wrong, and a reward function is the user's code. A ``KeyboardInterrupt`` caused by a Ctrl-C during the call
    (the second under ``GracefulStop``, the first without it) passes through unchanged
    (:class:`_SigintWatch` tells the two apart)."""
    with _SigintWatch() as sigint:
        try:
            return fn(**kwargs)
        except SystemExit as e:
            raise RewardFunctionError(
                f"{where} called {_exit_call(e)}{_origin(e.__traceback__)} while scoring completions; a reward "
                "function must return scores (raise an exception to stop the run)") from e
        except KeyboardInterrupt as e:
            if sigint.received:
                raise
            raise RewardFunctionError(
                f"{where} raised KeyboardInterrupt{_origin(e.__traceback__)} while scoring completions, and no "
                "Ctrl-C was pressed; a reward function must return scores (raise an ordinary exception to stop "
                "the run)") from e
        except Exception as e:
            raise RewardFunctionError(
                f"{where} raised {type(e).__name__}: {e} (it was called with keyword arguments "
                f"{sorted(kwargs)}); fix the function or the data it reads"
            ) from e


def _await_all(outs: list[Any], names: Sequence[str]) -> list[Any]:
    """``outs`` with each awaitable (an async reward function's coroutine) awaited, all of them
    concurrently (``asyncio.gather``); what one raises becomes a :class:`RewardFunctionError`
    naming it. Runs in a thread of its own where the caller already has an event loop running."""
    import asyncio

    pending = [i for i, out in enumerate(outs) if inspect.isawaitable(out)]
    if not pending:
        return outs

    async def named(i: int) -> Any:
        try:
            return await outs[i]
        except Exception as e:
            raise RewardFunctionError(f"reward function '{names[i]}' raised {type(e).__name__}: {e}") from e

    async def gather() -> list[Any]:
        return await asyncio.gather(*(named(i) for i in pending))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        results = asyncio.run(gather())
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            results = pool.submit(asyncio.run, gather()).result()
    done = list(outs)
    for i, result in zip(pending, results):
        done[i] = result
    return done


class RewardScorer:
    """Scores a text batch with weighted reward functions; the trainer's ``score_fn``.

    Args:
        fns: reward functions or names accepted by :func:`load_reward_fn`.
        weights: one weight per function; all 1.0 when omitted.
        registry: the short names ``fns`` may use (see :func:`load_reward_fn`).

    Attributes:
        fns: the loaded functions.
        names: their metric names (``reward/<name>``), unique.
        weights: the weights, as floats.
    """

    def __init__(
        self, fns: Sequence[Callable | str], weights: Sequence[float] | None = None,
        registry: Mapping[str, Callable] | None = None,
    ):
        if isinstance(fns, str) or callable(fns):  # one function given bare: not a sequence of characters
            fns = [fns]
        fns = list(fns)
        if not fns:
            raise RewardFunctionError("RewardScorer needs at least one reward function")
        self.fns: list[Callable] = [load_reward_fn(f, registry) for f in fns]
        if weights is None:
            weights = [1.0] * len(self.fns)
        weights = list(weights)
        if len(weights) != len(self.fns):
            raise RewardFunctionError(f"got {len(weights)} reward weights for {len(self.fns)} reward functions; give one weight per function")
        try:
            self.weights: list[float] = [float(w) for w in weights]
        except (TypeError, ValueError) as e:
            raise RewardFunctionError(f"reward weights must be numbers, got {weights!r}") from e
        bad = [w for w in self.weights if not math.isfinite(w)]
        if bad:
            raise RewardFunctionError(f"reward weights must be finite, got {weights!r}")
        self.names: list[str] = _unique_names(self.fns)
        # Keyword arguments every function gets as they are, not copied (a trainer's state, logging hooks).
        self.extra: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"RewardScorer({dict(zip(self.names, self.weights))})"

    def check_dataset(self, rows: Any, source: str = "dataset", prompt_column: str = "prompt") -> None:
        """Refuse, before the first step, functions that cannot take the keywords these rows will
        give them and rows they cannot score (:func:`check_rows`)."""
        check_rows(self.fns, self.names, rows, source, prompt_column, list(self.extra))

    def __call__(self, batch: RolloutBatch) -> RolloutBatch:
        """Fill ``batch.rewards`` (weighted sum over the functions that scored each sample; 0.0
        where none did), ``batch.reward_components`` (``(B, n_fns)`` unweighted values, NaN where
        a function returned None) and ``batch.metrics["reward/<name>"]`` (each function's
        unweighted mean over the samples it scored)."""
        if batch.text is None:
            raise ValueError("RewardScorer needs batch.text (prompts and completions, one entry per output); "
                             "the sampler did not set it")
        text = batch.text
        totals, components = self.score(text.prompts, text.completions, text.columns, text.completion_ids)
        b = batch.batch_size
        device = batch.tokens.device
        batch.rewards = torch.tensor(totals, dtype=torch.float32, device=device)
        batch.reward_components = torch.tensor(
            [[math.nan if v is None else v for v in row] for row in zip(*components)], dtype=torch.float32, device=device
        ).reshape(b, len(self.fns))
        for name, values in zip(self.names, components):
            scored = [v for v in values if v is not None]
            if scored:  # a function may return None for every sample: it applied to none of them
                batch.metrics[f"reward/{name}"] = sum(scored) / len(scored)
        return batch

    def score(self, prompts: Sequence[Any], completions: Sequence[Any], columns: Mapping[str, Sequence[Any]],
              completion_ids: Sequence[Sequence[int]] | None = None) -> tuple[list[float], list[list[float | None]]]:
        """``(totals, components)`` of B completions: each one's weighted sum over the functions
        that scored it (0.0 where none did), and each function's B values (None: not scored)."""
        b = len(completions)
        kwargs: dict[str, Any] = {"prompts": list(prompts), "completions": list(completions),
                                  "completion_ids": completion_ids}
        clash = sorted(set(columns) & (set(kwargs) | set(self.extra)))
        if clash:
            raise RewardFunctionError(f"dataset column(s) {clash} clash with reward function arguments; rename them")
        kwargs.update(columns)
        # Each function gets arguments of its own: what one edits, the next does not see.
        outs = [_call(fn, f"reward function '{name}'", {**{k: _private_copy(v) for k, v in kwargs.items()}, **self.extra})
                for fn, name in zip(self.fns, self.names)]
        outs = _await_all(outs, self.names)  # async functions run concurrently, after the others
        components = [self._check_output(out, name, b) for out, name in zip(outs, self.names)]
        if b and all(v is None for values in components for v in values):
            raise RewardFunctionError(
                f"reward function{'s' if len(self.names) > 1 else ''} {', '.join(repr(n) for n in self.names)} "
                f"returned None for all {b} completions: nothing scored them, so every reward would be 0 and "
                "nothing trained; return a number where a function applies")
        totals = [0.0] * b
        for values, w in zip(components, self.weights):
            for i, v in enumerate(values):
                if v is not None:
                    totals[i] += w * v
        return totals, components

    @staticmethod
    def _check_output(out: Any, name: str, b: int) -> list[float | None]:
        """``out`` as B finite numbers or None (None for every sample is allowed, as in TRL)."""
        where = f"reward function '{name}'"
        if isinstance(out, (torch.Tensor, np.ndarray)):
            if out.ndim != 1:
                raise RewardFunctionError(
                    f"{where} returned a {out.ndim}-D {type(out).__name__} of shape {tuple(out.shape)}; "
                    f"return a list of {b} floats, one per completion"
                )
            out = out.tolist()
        elif not isinstance(out, (list, tuple)):
            raise RewardFunctionError(
                f"{where} returned {type(out).__name__}; return a list of {b} floats (or None), one per completion"
            )
        if len(out) != b:
            raise RewardFunctionError(f"{where} returned the wrong number of values: got {len(out)}, expected {b} (one per completion)")
        values: list[float | None] = []
        for i, v in enumerate(out):
            if v is None:
                values.append(None)
                continue
            if not isinstance(v, numbers.Real):
                raise RewardFunctionError(
                    f"{where} returned {v!r:.80} ({type(v).__name__}) at index {i}; "
                    "each value must be a number, or None when the sample does not apply"
                )
            v = float(v)
            if not math.isfinite(v):
                raise RewardFunctionError(
                    f"{where} returned the non-finite value {v} at index {i}; "
                    "return a finite number, or None when the sample does not apply"
                )
            values.append(v)
        return values
