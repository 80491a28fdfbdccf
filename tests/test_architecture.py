"""The layers of docs/architecture.md, kept true to the code: imports run down the layers, doors
import no other door, the page's diagram is the import graph, and every function fits a screen."""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "grpo_seq"
# Each layer, lowest first; a module may import its own layer and those below it.
LAYERS = ["errors", "math", "core", "envs", "agents", "jobs", "doors", "package"]
DOORS = ("cli", "sb3", "trl", "serve")
MATH = ("math",)  # grpo_seq/math/: the formulas and the batch
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer(module: str) -> str:
    """``grpo_seq.sb3.model`` -> ``sb3`` (a door), ``grpo_seq.math.objective`` -> ``math``, ..."""
    if module == "grpo_seq":
        return "package"
    top = module.split(".")[1]
    if top in DOORS or top in ("envs", "agents", "jobs", "errors"):
        return top
    return "math" if top in MATH else "core"


def rank(name: str) -> int:
    return LAYERS.index("doors" if name in DOORS else name)


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The grpo_seq modules an import statement loads (``from . import x`` of a submodule: that submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "grpo_seq"]
    base = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
    if node.level:
        base = base[:len(base) - node.level + 1] + ([node.module] if node.module else [])
        source = ".".join(base)
    else:
        source = node.module or ""
    if source.split(".")[0] != "grpo_seq":
        return []
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names]


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (read by type checkers, never run)."""
    return {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for stmt in block.body for n in ast.walk(stmt)}


@functools.cache
def tree_of(module: str) -> ast.Module:
    """The module's syntax tree, parsed once for every check here."""
    return ast.parse(MODULES[module].read_text())


@functools.cache
def import_edges() -> frozenset[tuple[str, str]]:
    """Every (importer, imported) pair of grpo_seq modules that runs, lazy imports inside functions
    included, type-checking-only imports not."""
    edges = set()
    for module in MODULES:
        tree = tree_of(module)
        skip = _type_checking_only(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skip:
                for target in _targets(module, node):
                    while target not in MODULES and "." in target:
                        target = target.rsplit(".", 1)[0]
                    edges.add((module, target))
    return frozenset(edges)


def layer_edges() -> set[tuple[str, str]]:
    return {(layer(a), layer(b)) for a, b in import_edges() if layer(a) != layer(b)}


def test_the_layering_sees_the_package():
    # the checks below would pass on an empty graph: make sure they look at the real one
    assert {"grpo_seq.jobs.env", "grpo_seq.cli.programs", "grpo_seq.sb3.model", "grpo_seq.math.objective"} <= set(MODULES)
    assert ("grpo_seq.cli.programs", "grpo_seq.jobs.env") in import_edges()
    assert layer("grpo_seq.sb3.model") == "sb3" and layer("grpo_seq.math.advantages") == "math"


def test_imports_run_down_the_layers():
    upward = sorted(f"{a} -> {b}" for a, b in import_edges() if rank(layer(b)) > rank(layer(a)))
    assert upward == []


def test_no_door_imports_another_door():
    crossing = sorted(f"{a} -> {b}" for a, b in import_edges()
                      if layer(a) in DOORS and layer(b) in DOORS and layer(a) != layer(b))
    assert crossing == []


# The core's moving parts a door may not reach: it asks the job layer (grpo_seq/jobs/) to build them.
DOOR_MAY_NOT_IMPORT = ("grpo_seq.sampling", "grpo_seq.loop", "grpo_seq.io.checkpoint", "grpo_seq.policies")
# ... except these, each for its reason
DOOR_MAY_IMPORT = {
    "grpo_seq.loop.config": "LoopConfig, the public config each door maps its users' option names onto",
    "grpo_seq.sampling.spaces": "the space codec: the SB3 door takes SB3's spaces exactly as the sampler encodes them",
    "grpo_seq.policies.mlp": "the SB3 door's MlpPolicy is the core MLP with SB3's spaces, predict and save",
}


def test_doors_reach_the_core_only_through_the_job_layer():
    reaching = sorted(f"{a} -> {b}" for a, b in import_edges()
                      if layer(a) in DOORS and b.startswith(DOOR_MAY_NOT_IMPORT) and b not in DOOR_MAY_IMPORT)
    assert reaching == []


def mermaid_edges(text: str) -> set[tuple[str, str]]:
    block = re.search(r"```mermaid\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no mermaid block"
    return set(re.findall(r"^\s*(\w+)\s*-->\s*(\w+)\s*$", block.group(1), re.M))


def test_the_architecture_page_draws_the_import_graph():
    drawn = mermaid_edges((ROOT / "docs" / "architecture.md").read_text())
    actual = layer_edges()
    wanted = "\n".join(f"    {a} --> {b}" for a, b in sorted(actual))
    assert drawn == actual, f"the diagram's edges should be:\n{wanted}"


def test_no_function_is_longer_than_a_screen():
    long = []
    for module in MODULES:
        for node in ast.walk(tree_of(module)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {lines} lines")
    assert long == []


def loaded_after(statement: str, watched: tuple[str, ...]) -> list[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps([m for m in {list(watched)!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("door, unwanted", [
    ("grpo_seq.sb3", ("grpo_seq.cli", "grpo_seq.trl", "transformers", "transformers.hf_argparser")),
    ("grpo_seq.trl", ("grpo_seq.cli", "grpo_seq.sb3", "transformers.hf_argparser")),
    ("grpo_seq.jobs", ("grpo_seq.cli", "grpo_seq.sb3", "grpo_seq.trl", "torch", "transformers")),
    ("grpo_seq.serve", ("grpo_seq.cli", "grpo_seq.sb3", "grpo_seq.trl", "torch", "fastapi")),
])
def test_a_door_loads_no_other_door_and_no_argument_parser(door, unwanted):
    assert loaded_after(f"import {door}", unwanted) == []


def import_cycles() -> list[list[str]]:
    """The groups of modules that import each other, lazily or not, directly or around a loop
    (strongly connected components of the import graph with more than one module)."""
    graph: dict[str, set[str]] = {}
    for a, b in import_edges():
        if a != b:
            graph.setdefault(a, set()).add(b)
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            group = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in order:
            visit(v)
    return cycles


def test_no_modules_import_each_other():
    assert import_cycles() == []
