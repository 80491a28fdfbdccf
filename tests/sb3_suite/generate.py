"""Write tests/sb3_suite/test_sb3_*.py: Stable-Baselines3 2.9.2's own tests, its PPO cases only,
with ``PPO`` taken from :mod:`sb3_algo` (``grpo_seq.sb3.GRPO``, or SB3's ``PPO`` with
``SB3_SUITE_ALGO=ppo``).

    pip download stable-baselines3==2.9.2 --no-binary :all: --no-deps && tar xzf stable_baselines3-2.9.2.tar.gz
    python tests/sb3_suite/generate.py stable_baselines3-2.9.2/tests

What it does to each file:

- ``from stable_baselines3 import ..., PPO`` loses ``PPO``; ``from sb3_algo import PPO`` takes its place.
- A ``parametrize`` list of algorithm classes keeps ``PPO`` alone; a test without a PPO case is left
  out. A test that trains only ``A2C`` (SB3's other on-policy algorithm; ``test_utils``,
  ``test_logger``, ``test_callbacks``), or whose list has ``A2C`` and no ``PPO``, runs with ``PPO``
  in its place and a small ``n_steps`` (64) where it does not set one.
- Continuous actions stay (``Pendulum-v1``, ``IdentityEnvBox``): they are tokens over evenly spaced
  values here.
- :data:`EDITS` adapts single tests (each edit says why); :data:`LEFT_OUT` names the PPO cases left
  out and why (docs/guides/sb3.md lists them).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ALGOS = {"A2C", "DDPG", "DQN", "PPO", "SAC", "TD3"}
FILES = ("test_run", "test_save_load", "test_callbacks", "test_predict", "test_deterministic", "test_tensorboard",
         "test_identity", "test_custom_policy", "test_spaces", "test_utils", "test_logger", "test_vec_monitor",
         "test_dict_env", "test_cnn")

# PPO cases left out, and why.
LEFT_OUT = {
    "test_identity.py::test_continuous": "learns the continuous identity, but not to SB3's threshold (90 of 100) "
                                         "within the test's 1,000 steps at its learning rate of 1e-3",
    "test_save_load.py::test_load_invalid_object": "corrupts the cloudpickle blob SB3 writes for a lambda learning rate; "
                                                   "GRPO saves no pickle (a schedule is saved as its values), so there is "
                                                   "no blob to corrupt",
    "test_run.py::test_ppo_warnings": "PPO's rollout-size check, truncated-minibatch and GPU warnings, on Pendulum",
    "test_save_load.py::test_save_load_policy": "kept without gSDE (state-dependent exploration of continuous "
                                                "actions), which is not here",
    "test_logger.py::test_sb3_import_without_optional_deps": "imports stable_baselines3 itself, no PPO case",
    "test_dict_env.py::test_multiprocessing": "a SubprocVecEnv of unregistered envs: GRPO makes its own envs (a "
                                              "group's members from one state), from an id or a copy, and cannot copy "
                                              "an env that lives in another process",
    "test_cnn.py::test_image_like_input": "VecNormalize over images: GRPO steps the envs under a VecNormalize and "
                                          "normalises flat observations only",
    "test_logger.py::test_fps_logger": "asserts wall-clock speed (100 frames a second or more with a 1 ms env), "
                                       "which a busy machine misses; tests/sb3/test_sb3.py checks the logged value",
}

# Per test: (old, new) text replacements on the test's source, and why.
EDITS: dict[str, tuple[str, list[tuple[str, str | None]]]] = {
    "test_tensorboard.py::test_tensorboard": (
        "only PPO's entry of the model table; the run folder is named after the class",
        [("MODEL_DICT.keys()", "['ppo']"), ("logname = model_name.upper()", "logname = MODEL_DICT[model_name][0].__name__")]),
    "test_save_load.py::test_save_load_policy": (
        "without gSDE (see the left-out list)", [("[False, True]", "[False]")]),
    "test_save_load.py::test_save_load_env_cnn": (
        "(A2C's case) CnnPolicy on images with continuous actions, saved, loaded and trained again; without its "
        "last part, which deletes PPO's own pi_features_extractor (a module GRPO's policy does not have)",
        [("if model_class == PPO:", None)]),
    "test_save_load.py::test_no_resource_warning": (
        "PPO's half (the replay buffer half is SAC's)", [("model = SAC(", None)]),
    "test_logger.py::test_set_logger": (
        "skipped without tensorboard, as test_tensorboard is (its logger writes tensorboard files)",
        [("new_logger = configure(", "pytest.importorskip('tensorboard')\n    new_logger = configure(")]),
    "test_utils.py::test_evaluate_policy": (
        "Acrobot's 500-step episodes in place of Pendulum's 200 (a fixed length, a negative reward)",
        [("'Pendulum-v1', seed=0", "'Acrobot-v1', seed=0"), ("= (200, 2)", "= (500, 2)"),
         ("eval_env = gym.make('Pendulum-v1')", "eval_env = gym.make('Acrobot-v1')")]),
    "test_callbacks.py::test_callbacks_can_cancel_runs": (
        "(A2C's case) a rollout of 2 steps: PPO refuses one", [("dict(n_steps=1,", "dict(n_steps=2,")]),
    "test_utils.py::test_evaluate_policy_monitors": (
        "SubprocVecEnv's workers forked, not started afresh (each fresh worker imports torch: ~50 s in all)",
        [("DummyVecEnv, SubprocVecEnv]", "DummyVecEnv, pytest.param(lambda fns: SubprocVecEnv(fns, "
          "start_method='fork'), id='SubprocVecEnv')]")]),
    "test_predict.py::test_subclassed_space_env": (
        "the subclassed Box stays the observation space; the action space is Discrete(2)",
        [("env = CustomSubClassedSpaceEnv()", "env = CustomSubClassedSpaceEnv()\n    "
          "env.action_space = spaces.Discrete(2)"),
         ("env.step(model.predict(obs))", "env.step(model.predict(obs)[0])")]),
}
# Per file: (old, new) text replacements.
FILE_EDITS = {
    # the episode counting case needs episodes that run to the time limit: Acrobot's, not CartPole's
    "test_callbacks": [("return 'Pendulum-v1'", "return 'Acrobot-v1'")],
}
A2C_N_STEPS = {  # A2C's own rollout where a test relies on it
    "test_logger.py::test_set_logger": 5,
}


def _test_id(file: str, name: str) -> str:
    return f"{file}.py::{name}"


def _algo_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in ALGOS}


def _is_algo_list(node: ast.AST) -> bool:
    return isinstance(node, ast.List) and bool(node.elts) and all(
        isinstance(v, ast.Name) and v.id in ALGOS for v in node.elts)


def _filter_params(fn: ast.FunctionDef, algo_lists: set[str]) -> bool | str | None:
    """Keep only PPO in the parametrize lists of algorithms. True: a PPO case remains; "A2C": no
    PPO case but an A2C one (kept, to run as PPO); False: neither (the test is for other
    algorithms); None: no list of algorithms."""
    found = None
    for dec in fn.decorator_list:
        if not (isinstance(dec, ast.Call) and ast.unparse(dec.func) == "pytest.mark.parametrize"):
            continue
        values = dec.args[1] if len(dec.args) > 1 else None
        if isinstance(values, ast.Name) and values.id in algo_lists:  # MODEL_LIST: reduced to [PPO] below
            found = True
        if not isinstance(values, ast.List):
            continue
        algos = [v for v in values.elts if _algo_names(v)]
        if algos:
            keep = "PPO" if any("PPO" in _algo_names(v) for v in algos) else "A2C"
            values.elts = [v for v in values.elts if keep in _algo_names(v) or not _algo_names(v)]
            found = (True if keep == "PPO" else "A2C") if values.elts else False
    return found


class _A2CtoPPO(ast.NodeTransformer):
    """``A2C`` becomes ``PPO``, its calls (by name, or by the test's algorithm parameter) given
    ``n_steps`` (A2C's rollout is 5 steps, PPO's 2048) unless they pass it or ``**kwargs``."""

    def __init__(self, n_steps: int, callers: tuple[str, ...] = ("PPO",)):
        self.n_steps, self.callers = n_steps, callers

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name("PPO", node.ctx) if node.id == "A2C" else node

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in self.callers and not any(
                k.arg in ("n_steps", None) for k in node.keywords):
            node.keywords.append(ast.keyword("n_steps", ast.Constant(self.n_steps)))
        return node


def _keep(file: str, fn: ast.FunctionDef, algo_lists: set[str]) -> str | None:
    """The test's adapted source, or None to leave it out."""
    tid = _test_id(file, fn.name)
    if tid in LEFT_OUT and tid not in EDITS:
        return None
    ppo_case = _filter_params(fn, algo_lists)
    used = _algo_names(ast.Module(fn.body, []))
    if ppo_case is False:
        return None
    if ppo_case == "A2C":  # an on-policy case of A2C only: run as PPO
        fn = _A2CtoPPO(A2C_N_STEPS.get(tid, 64), ("PPO", "model_class", "algo")).visit(fn)
    elif ppo_case is None and "PPO" not in used and tid not in EDITS:  # an edit names a PPO case: kept
        if used != {"A2C"}:
            return None
        fn = _A2CtoPPO(A2C_N_STEPS.get(tid, 64)).visit(fn)
    src = ast.unparse(fn)
    for old, new in EDITS.get(tid, ("", []))[1]:
        if old not in src:
            raise SystemExit(f"error: {tid}: the edit {old!r} no longer applies")
        src = src[:src.index(old)] if new is None else src.replace(old, new)  # None: cut from there on
    return src


def _imports(node: ast.ImportFrom) -> str:
    names = [a for a in node.names if a.name != "PPO"]
    text = ast.unparse(ast.ImportFrom(node.module, names, 0)) if names else ""
    return text


def generate(file: str, source: str) -> str:
    tree = ast.parse(source)
    out = [f'"""Generated by tests/sb3_suite/generate.py from Stable-Baselines3 2.9.2\'s tests/{file}.py '
           '(PPO cases only): do not edit."""', "from sb3_algo import PPO"]
    algo_lists = {t.id for node in tree.body if isinstance(node, ast.Assign) and _is_algo_list(node.value)
                  for t in node.targets if isinstance(t, ast.Name)}
    for node in tree.body:
        if "ale_py" in ast.unparse(node):  # Atari's envs: only for the Atari cases, not PPO's
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "stable_baselines3":
            out.append(_imports(node))
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            src = _keep(file, node, algo_lists)
            if src is not None:
                out.append(src)
        elif isinstance(node, ast.Assign) and _is_algo_list(node.value):  # MODEL_LIST = [PPO, A2C, ...]
            out.append(f"{ast.unparse(node.targets[0])} = [PPO]")
        else:
            out.append(ast.unparse(node))
    text = "\n\n".join(s for s in out if s) + "\n"
    for old, new in FILE_EDITS.get(file, ()):
        if old not in text:
            raise SystemExit(f"error: {file}.py: the edit {old!r} no longer applies")
        text = text.replace(old, new)
    return text


def main(tests_dir: str) -> None:
    here = Path(__file__).resolve().parent
    for file in FILES:
        source = (Path(tests_dir) / f"{file}.py").read_text()
        (here / f"test_sb3_{file.removeprefix('test_')}.py").write_text(generate(file, source))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python tests/sb3_suite/generate.py <stable-baselines3-2.9.2/tests>")
    main(sys.argv[1])
