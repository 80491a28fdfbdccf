"""A continuous-action env through the job layer: trained, saved, evaluated and acted with the
same bins from the saved policy alone."""

from __future__ import annotations

import json

import numpy as np

from grpo_seq.jobs.env import env_codec, load_actor, policy_action_bins, run_env_job
from grpo_seq.jobs.env_spec import EnvJob


def test_a_box_action_env_trains_and_is_evaluated_with_its_own_bins(tmp_path, capsys):
    from grpo_seq.cli.tools import eval_env
    from grpo_seq.io.serialization import load_policy

    spec = EnvJob(env_id="Pendulum-v1", total_env_steps=1_600, eval_every=800, solved_return=-200.0,
                  action_bins=5, output_dir=str(tmp_path / "run"), seed=0)
    run_env_job(spec)
    policy = load_policy(str(tmp_path / "run" / "policy"))
    assert policy.action_nvec == [5] and policy_action_bins(policy) == 5  # one dimension, 5 values
    # evaluation from the saved policy alone cuts the torque into the same 5 values
    capsys.readouterr()
    eval_env(["--policy", str(tmp_path / "run" / "policy"), "--env_id", "Pendulum-v1", "--episodes", "2"])
    out = json.loads(capsys.readouterr().out)
    assert len(out["returns"]) == 2 and all(-2_000 < r <= 0 for r in out["returns"])
    _, act = load_actor(tmp_path / "run" / "policy")
    tokens = act(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 5.0]], np.float32))
    torques = env_codec("Pendulum-v1", action_bins=5).decode_actions(tokens)
    assert torques.shape == (2, 1) and set(torques.ravel().tolist()) <= {-2.0, -1.0, 0.0, 1.0, 2.0}


def test_an_env_without_a_threshold_trains_its_whole_budget_unsolved(tmp_path):
    # Pendulum registers no reward_threshold: without --solved_return nothing counts as solved,
    # the evaluations still run and the budget is spent
    spec = EnvJob(env_id="Pendulum-v1", total_env_steps=1_600, eval_every=800, stop_after_solved=1,
                  num_groups=1, output_dir=str(tmp_path / "run"), seed=0)  # a group per step: two evaluations
    summary = run_env_job(spec)
    assert summary["solved"] is False and summary["solved_env_steps"] is None
    assert summary["env_steps"] >= 1_600 and summary["final_eval_return"] < 0
    evals = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if "eval/return" in x]
    assert len(evals) == 2
