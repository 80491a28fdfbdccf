"""Run a program as ``subprocess.run`` would, in a child forked from a warm process.

Most of a short command's time is importing torch, transformers and grpo_seq. A fork server
(:mod:`multiprocessing`'s ``forkserver``, started once per test process) imports them once; each
program then runs in a fresh child forked from it: its own process, working folder, environment,
exit status, stdout and stderr, as a subprocess has, without the imports. The server runs no
torch operation and starts no thread before it forks, so its children start clean.

``run(argv, cwd, env)`` takes what ``subprocess.run`` takes: ``["grpo-seq", ...]``,
``[sys.executable, "script.py", ...]``, ``[sys.executable, "-m", "module", ...]`` or
``[sys.executable, "-c", "code", ...]``; anything else (another program) runs as a subprocess.
Programs that are sent signals or that must start a fresh interpreter (the distributed launcher)
keep using ``subprocess``.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

# Imported once by the server, inherited by every child (what a program would import anyway).
PRELOAD = ["torch", "numpy", "accelerate", "transformers", "gymnasium", "grpo_seq.cli.commands",
           "grpo_seq.cli.programs", "grpo_seq.jobs.lm", "grpo_seq.jobs.env", "grpo_seq.loop.trainer",
           "grpo_seq.policies.causal_lm", "grpo_seq.sampling.lm", "grpo_seq.sampling.env", "matplotlib.pyplot",
           # the model class of SmolLM2 and of the tests' tiny models: seconds to import, in every LM child
           "transformers.models.llama.modeling_llama", "datasets", "peft"]
# read once when a library is imported, so the server must have them before it imports
SERVER_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TQDM_DISABLE": "1", "TOKENIZERS_PARALLELISM": "false",
              "TRANSFORMERS_VERBOSITY": "error", "MPLBACKEND": "Agg"}

_context: Any = None
_starting = threading.Lock()  # a start swaps __main__'s attributes: one at a time (threads may run programs)


class _NoMainModule:
    """While a child starts: multiprocessing would import the parent's __main__ in the child
    (pytest's, or a script's); a program here brings its own."""

    def __enter__(self) -> None:
        main = sys.modules["__main__"]
        self.saved = {k: main.__dict__.pop(k) for k in ("__file__", "__spec__") if k in main.__dict__}
        main.__spec__ = None

    def __exit__(self, *exc: Any) -> None:
        main = sys.modules["__main__"]
        del main.__spec__
        main.__dict__.update(self.saved)


def _ctx() -> Any:
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        saved = dict(os.environ)
        os.environ.update(SERVER_ENV)
        try:  # the server starts now, with this environment
            with _NoMainModule():
                ctx.Process(target=_noop).start()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        _context = ctx
    return _context


def _noop() -> None:
    pass


def _entry(argv: Sequence[str]) -> tuple[str, str, list[str]] | None:
    """(how, what, sys.argv) for a program the server can run, else None."""
    if not argv:
        return None
    if Path(argv[0]).name == "grpo-seq":
        return "grpo-seq", "", ["grpo-seq", *argv[1:]]
    if argv[0] not in (sys.executable, "python", "python3") or len(argv) < 2:
        return None
    if argv[1] == "-m" and len(argv) > 2:
        return "module", argv[2], [argv[2], *argv[3:]]
    if argv[1] == "-c" and len(argv) > 2:
        return "code", argv[2], ["-c", *argv[3:]]
    if argv[1].endswith(".py"):
        return "script", argv[1], list(argv[1:])
    return None


def forkable(argv: Sequence[str]) -> bool:
    """Whether :func:`run` forks ``argv`` (a Python program) rather than starting a subprocess."""
    return _entry(list(argv)) is not None


def _child(how: str, what: str, argv: list[str], cwd: str, env: dict[str, str], out: str, err: str,
           preexec_fn: Any = None) -> None:
    """In the forked child: become the program, then exit with its status."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    if preexec_fn is not None:  # as subprocess calls it: in the child, before the program starts
        preexec_fn()
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    sys.argv = argv
    sys.orig_argv = [sys.executable, *{"module": ["-m"], "code": ["-c", what], "grpo-seq": [argv[0]]}.get(how, []),
                     *(argv if how in ("script", "module") else argv[1:])]
    for entry in reversed([p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]):
        sys.path.insert(0, entry)
    code = 0
    try:
        if how == "grpo-seq":
            from grpo_seq.cli.commands import main

            main(argv[1:])
        elif how == "module":
            sys.path.insert(0, cwd)
            sys.modules.pop(what, None)  # preloaded: run it afresh as __main__, as ``python -m`` would
            runpy.run_module(what, run_name="__main__", alter_sys=True)
        elif how == "code":
            sys.path.insert(0, "")
            exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.path.insert(0, str(Path(cwd, what).resolve().parent))
            runpy.run_path(what, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the program's own traceback, as the interpreter prints it
        import traceback

        traceback.print_exc()
        code = 1
    try:  # what the interpreter does at exit: atexit handlers (logging, trackers, temporary files)
        import atexit

        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def run(argv: Sequence[str], cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
        timeout: float = 900, capture_output: bool = True, text: bool = True, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)``,
    forked from the warm server where ``argv`` is a Python program (with ``preexec_fn``, when it can
    be pickled, called in the child before the program starts, as subprocess does)."""
    entry = _entry(list(argv))
    preexec_fn = kwargs.get("preexec_fn")
    if preexec_fn is not None and set(kwargs) == {"preexec_fn"} and _picklable(preexec_fn):
        del kwargs["preexec_fn"]  # sent to the child (a resource limit, say), which calls it before the program
    if entry is None or kwargs or not capture_output or not text:
        return subprocess.run(list(argv), cwd=cwd, env=env, timeout=timeout, capture_output=capture_output, text=text,
                              **kwargs)
    how, what, child_argv = entry
    cwd = str(Path(cwd or os.getcwd()).absolute())
    env = {**SERVER_ENV, **dict(os.environ if env is None else env)}
    with tempfile.TemporaryDirectory(prefix="forkrun-") as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        with _starting:
            p = _ctx().Process(target=_child, args=(how, what, child_argv, cwd, env, out, err, preexec_fn))
            with _NoMainModule():
                p.start()
        p.join(timeout)
        if p.exitcode is None:
            p.kill()
            p.join()
            raise subprocess.TimeoutExpired(list(argv), timeout)
        return subprocess.CompletedProcess(list(argv), p.exitcode, Path(out).read_text(errors="replace"),
                                           Path(err).read_text(errors="replace"))


def _picklable(obj: Any) -> bool:
    """Whether ``obj`` can be sent to a forked child (a module-level function or a partial of one)."""
    import pickle

    try:
        pickle.dumps(obj)
    except Exception:  # noqa: BLE001 - a closure, a lambda: the caller's subprocess then runs it
        return False
    return True
