"""Runs off the happy path at their end: weights that diverge (finite, but grown by orders of
magnitude in one step), a fork's summary naming its best policy, a plotting backend that fails
after the run is done. Each through the entry point; docs/guides/faults.md lists these cases."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from faultkit import LM_QUIET, TINY, one_error_line, write_jsonl

from grpo_seq.errors import DivergedError
from grpo_seq.io.checkpoint import checkpoint_dir, list_checkpoints, verify_checkpoint

ROOT = Path(__file__).resolve().parents[2]

LM_SIGNAL = ["--reward_fns", "tiny_lm:length_reward", "--num_generations", "4", "--max_completion_length", "8",
             "--max_steps", "2"]  # completions of different lengths: a group with a gradient
ROWS = [{"question": "What is 2 + 3?", "answer": "#### 5"}, {"question": "And 4 + 4?", "answer": "#### 8"}]


def largest_saved_weight(run_dir: Path) -> float:
    """max |w| over every safetensors file under ``run_dir`` (0 when none was saved)."""
    from safetensors.torch import load_file

    found = [float(w.abs().max()) for f in run_dir.rglob("*.safetensors") for w in load_file(str(f)).values()
             if w.is_floating_point() and w.numel()]
    return max(found, default=0.0)


@pytest.fixture
def growth_seen(monkeypatch) -> list[float]:
    """Every optimizer step's weight growth the divergence check measured, in order."""
    import grpo_seq.loop.guards as guards

    seen, real = [], guards.weight_growth

    def spy(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(guards, "weight_growth", spy)
    return seen


def lm_argv(tiny_model: Path, tmp_path: Path, *extra: str) -> list[str]:
    dataset = write_jsonl(tmp_path / "d.jsonl", ROWS)
    return [*LM_QUIET, "--model", str(tiny_model), "--dataset", str(dataset), "--output_dir", str(tmp_path / "run"),
            *LM_SIGNAL, *extra]


# -- divergence ---------------------------------------------------------------------------------------

def test_a_huge_learning_rate_stops_cartpole_with_nothing_diverged_saved(run_main, cartpole, tmp_path):
    run_dir = tmp_path / "run"
    res = run_main(cartpole, [*TINY, "--learning_rate", "1e30", "--output_dir", str(run_dir)])
    assert res.code == 1, res
    line = one_error_line(res.err)
    assert line.startswith("error: the run diverged at step 1: the weights' norm grew ") and "-fold in one" in line
    assert "no checkpoint was written before it" in line and "lower --learning_rate (now 1e+30)" in line
    assert "error during step" not in res.err  # no checkpoint attempted of the diverged weights
    for name in ("policy", "policy_best", "summary.json", "checkpoints"):
        assert not (run_dir / name).exists(), name
    assert largest_saved_weight(run_dir) == 0.0


def test_a_policy_collapsed_to_determinism_in_one_step_stops_the_run(run_main, cartpole, tmp_path):
    # lr 10: the weights grow ~60-fold in Adam's first step (under the factor), but every action's
    # probability goes to 0 or 1: each group's members would act alike from then on.
    run_dir = tmp_path / "run"
    res = run_main(cartpole, [*TINY, "--learning_rate", "10", "--output_dir", str(run_dir)])
    assert res.code == 1, res
    line = one_error_line(res.err)
    assert line.startswith("error: the run diverged at step 1: the policy collapsed to determinism in one step "
                           "(its entropy fell from 0.693 to ")
    assert "lower --learning_rate (now 10)" in line
    for name in ("policy", "policy_best", "summary.json", "checkpoints"):
        assert not (run_dir / name).exists(), name


def check_collapse_to_certainty(entropy_before: float, optimizer_steps: int, num_actions: int = 4) -> None:
    """The guard's collapse check after one step that left every action of a ``num_actions``-way policy
    certain (entropy 0 at every token), from ``entropy_before`` nats per token over ``optimizer_steps``."""
    import torch

    from grpo_seq.loop.config import LoopConfig
    from grpo_seq.loop.guards import WeightGuard
    from grpo_seq.loop.update import UpdateStats
    from grpo_seq.math.batch import RolloutBatch
    from grpo_seq.policies.mlp import CategoricalMLPPolicy

    class Sure(CategoricalMLPPolicy):
        def forward(self, batch, with_entropy=False):
            return torch.zeros(batch.tokens.shape), torch.zeros(batch.tokens.shape)

    policy = Sure(obs_dim=1, num_actions=num_actions)
    batch = RolloutBatch(context=torch.zeros(4, 8, 1), tokens=torch.zeros(4, 8, dtype=torch.long),
                         mask=torch.ones(4, 8, dtype=torch.bool), group=torch.zeros(4, dtype=torch.long),
                         num_generations=4, rewards=torch.arange(4.0))
    stats = UpdateStats(token_sums={"entropy": torch.tensor(entropy_before * 32)}, tokens=torch.tensor(32.0),
                        losses=[torch.tensor(0.0)] * optimizer_steps)
    guard = WeightGuard(LoopConfig(), list(policy.parameters()), None)
    guard.check_collapse(policy, batch, torch.ones(4, dtype=torch.bool), stats, 0)
    assert guard.diverged_at is None


def test_a_step_of_many_optimizer_steps_may_leave_a_policy_sure_of_its_actions():
    # the Stable-Baselines3 door's step is n_epochs passes of minibatches, hundreds of optimizer steps:
    # a policy that learns its task within one such step is sure of its actions, not diverged
    check_collapse_to_certainty(0.9, optimizer_steps=320)
    with pytest.raises(DivergedError, match="collapsed to determinism in one step"):  # one optimizer step: diverged
        check_collapse_to_certainty(0.9, optimizer_steps=1)


def test_a_policy_mostly_sure_of_its_actions_may_become_sure_in_one_step():
    # 4 actions (uniform: log 4 = 1.39 nats): from 0.5 nats, under half of that, a policy has learned
    # its task; from 0.9 it still explores, and falling to 0 in one optimizer step is a collapse
    from grpo_seq.policies.mlp import CategoricalMLPPolicy

    assert CategoricalMLPPolicy(obs_dim=1, num_actions=4).uniform_entropy == pytest.approx(math.log(4))
    factored = CategoricalMLPPolicy(obs_dim=1, num_actions=6, action_nvec=[2, 3])
    assert factored.uniform_entropy == pytest.approx(math.log(6) / 2)
    check_collapse_to_certainty(0.5, optimizer_steps=1)
    with pytest.raises(DivergedError, match="entropy fell from 0.9 to 0 nats"):
        check_collapse_to_certainty(0.9, optimizer_steps=1)


def test_divergence_later_in_a_run_keeps_the_last_sane_checkpoint(run_main, cartpole, tmp_path, monkeypatch):
    from grpo_seq.loop.update import PolicyUpdate

    real_run = PolicyUpdate.run

    def lr_exploding_at_step_3(self, batch, live, step, epsilon=None):  # sane for two steps, then 1e30
        if step >= 2:
            for g in self.optimizer.param_groups:
                g["lr"] = 1e30
        return real_run(self, batch, live, step, epsilon)

    monkeypatch.setattr(PolicyUpdate, "run", lr_exploding_at_step_3)
    run_dir = tmp_path / "run"
    argv = [*TINY, "--save_steps", "1", "--save_total_limit", "2", "--output_dir", str(run_dir)]
    res = run_main(cartpole, argv)
    assert res.code == 1, res
    line = one_error_line(res.err)
    sane = checkpoint_dir(run_dir, 2)
    assert "diverged at step 3" in line and f"the last sane checkpoint is {sane}" in line, line
    # a diverged checkpoint would have rotated step 1 out
    assert list_checkpoints(run_dir) == [checkpoint_dir(run_dir, 1), sane]
    verify_checkpoint(sane)
    assert 0 < largest_saved_weight(run_dir) < 100
    assert not (run_dir / "policy").exists() and not (run_dir / "summary.json").exists()
    monkeypatch.setattr(PolicyUpdate, "run", real_run)  # the sane checkpoint resumes
    res = run_main(cartpole, [*argv[:-2], "--resume_from", str(run_dir)])
    assert res.code == 0, res
    assert 0 < largest_saved_weight(run_dir / "policy") < 100


def test_divergence_factor_0_turns_the_check_off(run_main, cartpole, tmp_path):
    run_dir = tmp_path / "run"
    res = run_main(cartpole, [*TINY, "--learning_rate", "1e30", "--divergence_factor", "0", "--output_dir",
                              str(run_dir)])
    assert res.code == 0, res  # as before the check: the user asked for it
    assert largest_saved_weight(run_dir / "policy") > 1e20


def test_divergence_factor_out_of_range_is_refused(run_main, cartpole, tmp_path):
    res = run_main(cartpole, [*TINY, "--divergence_factor", "0.5", "--output_dir", str(tmp_path / "run")])
    assert res.code == 2, res
    assert "divergence_factor: must be > 1, or 0 to turn the check off, got 0.5" in one_error_line(res.err)
    assert not (tmp_path / "run").exists()


def test_a_huge_learning_rate_stops_the_lm_recipe_without_writing_model(run_main, gsm8k, tiny_model, tmp_path):
    res = run_main(gsm8k, lm_argv(tiny_model, tmp_path, "--learning_rate", "1e30"), script="recipes/gsm8k_tiny.py")
    assert res.code == 1, res
    line = one_error_line(res.err)
    assert "the run diverged at step" in line and "lower --learning_rate (now 1e+30)" in line, line
    run_dir = tmp_path / "run"
    assert not (run_dir / "model").exists() and not (run_dir / "summary.json").exists()
    assert largest_saved_weight(run_dir) == 0.0


def test_healthy_runs_never_trip_the_divergence_check(run_main, cartpole, gsm8k, tiny_model, tmp_path, growth_seen):
    # CartPole's defaults for a few thousand env steps, then the tiny LM at 5e-2, the highest
    # learning rate the test suite trains it with: every step stays within a few percent.
    res = run_main(cartpole, ["--total_env_steps", "3000", "--eval_every", "1000", "--eval_episodes", "2",
                              "--torch_threads", "1", "--output_dir", str(tmp_path / "cartpole")])
    assert res.code == 0, res
    cartpole_steps = len(growth_seen)
    res = run_main(gsm8k, lm_argv(tiny_model, tmp_path, "--learning_rate", "5e-2", "--max_steps", "3"),
                   script="recipes/gsm8k_tiny.py")
    assert res.code == 0, res
    assert cartpole_steps >= 10 and len(growth_seen) > cartpole_steps
    assert max(growth_seen) < 1.5, max(growth_seen)  # the default factor is 1000


# -- a fork's best policy -----------------------------------------------------------------------------

@pytest.mark.parametrize("eval_return, has_best", [(-1e6, False), (1e6, True)])
def test_a_forks_summary_names_a_best_policy_that_exists(run_main, cartpole, run_copy, tmp_path, monkeypatch,
                                                         eval_return, has_best):
    from grpo_seq.scoring.evaluation import PolicyEvaluator

    real_eval = PolicyEvaluator.__call__
    monkeypatch.setattr(PolicyEvaluator, "__call__",  # the fork never beats, or always beats, run A's best
                        lambda self, policy, seed=None: np.zeros_like(real_eval(self, policy, seed)) + eval_return)
    fork = tmp_path / "fork"
    res = run_main(cartpole, [*TINY, "--seed", "0", "--total_env_steps", "600", "--resume_from", str(run_copy),
                              "--output_dir", str(fork)])
    assert res.code == 0, res
    best = json.loads((fork / "summary.json").read_text())["best_policy"]
    if has_best:
        assert best == str(fork / "policy_best") and (fork / "policy_best" / "policy.json").is_file()
    else:
        assert best is None and not (fork / "policy_best").exists()


# -- a plotting backend that fails at the end --------------------------------------------------------

def _failing_plot(*args, **kwargs):
    raise ValueError("Key backend: 'nonexistent_backend' is not a valid value for backend")


@pytest.mark.parametrize("program", ["cartpole", "gsm8k"])
def test_a_failing_plot_leaves_a_finished_run_finished(run_main, cartpole, gsm8k, tiny_model, tmp_path, monkeypatch,
                                                       program):
    import grpo_seq.io.plot as plot_mod

    monkeypatch.setattr(plot_mod, "plot_runs", _failing_plot)
    if program == "cartpole":
        res = run_main(cartpole, [*TINY, "--output_dir", str(tmp_path / "run")])
    else:
        res = run_main(gsm8k, lm_argv(tiny_model, tmp_path, "--learning_rate", "1e-3"), script="recipes/gsm8k_tiny.py")
    assert res.code == 0, res
    assert "error:" not in res.err and "Traceback" not in res.err, res
    # said as the run's other lines are (above the progress bar), once
    warnings = [ln for ln in res.out.splitlines() if ln.startswith("warning: the learning curves were not drawn")]
    assert len(warnings) == 1 and "nonexistent_backend" in warnings[0] and "grpo-seq plot" in warnings[0], res.out
    run_dir = tmp_path / "run"
    assert (run_dir / "summary.json").is_file() and not (run_dir / "curves.png").exists()
    assert (run_dir / ("policy" if program == "cartpole" else "model")).is_dir()


def test_an_unknown_mplbackend_leaves_a_separate_interpreter_run_finished(tmp_path):
    env = {**os.environ, "MPLBACKEND": "nonexistent_backend", "TQDM_DISABLE": "1"}
    res = subprocess.run([sys.executable, "recipes/cartpole.py", *TINY, "--output_dir", str(tmp_path / "run")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "error:" not in res.stderr, res.stderr[-3000:]
    warnings = [ln for ln in res.stdout.splitlines() if ln.startswith("warning: the learning curves were not drawn")]
    assert len(warnings) == 1 and "nonexistent_backend" in warnings[0], res.stdout[-3000:]
    assert (tmp_path / "run" / "summary.json").is_file() and (tmp_path / "run" / "policy").is_dir()
