"""The Gaussian head over a continuous action's values: its numbers by hand, its draws, its
refusals, and a job that trains one (the SB3 door's: tests/sb3/test_sb3_continuous.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from grpo_seq import GRPO
from grpo_seq.errors import UsageError
from grpo_seq.math.batch import RolloutBatch
from grpo_seq.policies.mlp import CategoricalMLPPolicy, gaussian_bin_logits


def _policy(bins=3, dims=1, mean=0.5, log_std=math.log(0.5)):
    """A policy whose every observation gives each dimension the mean ``mean``."""
    policy = CategoricalMLPPolicy(1, bins**dims, (4,), action_nvec=[bins] * dims, action_head="gaussian")
    with torch.no_grad():
        policy.net[-1].weight.zero_()
        policy.net[-1].bias.fill_(mean)
        policy.log_std.fill_(log_std)
    return policy


def _batch(tokens):
    n = len(tokens)
    return RolloutBatch(context=torch.zeros(1, n, 1), tokens=torch.tensor([tokens]), mask=torch.ones(1, n, dtype=torch.bool),
                        group=torch.zeros(1, dtype=torch.long), num_generations=2, rewards=torch.zeros(1), partial=True)


def test_the_logits_are_the_gaussians_log_density_at_the_values():
    # values -1, 0, 1; mean 0.5, sigma 0.5: -(u - 0.5)^2 / (2 * 0.25) = -4.5, -0.5, -0.5
    got = gaussian_bin_logits(torch.tensor([[0.5]]), torch.tensor([math.log(0.5)]), 3)
    np.testing.assert_allclose(got.numpy(), [[-4.5, -0.5, -0.5]], atol=1e-6)
    # arrays alike; two dimensions side by side: the second's mean -1, sigma 1 over -1, 0, 1: 0, -0.5, -2
    got = gaussian_bin_logits(np.array([[0.5, -1.0]], np.float32), np.array([math.log(0.5), 0.0], np.float32), 3)
    np.testing.assert_allclose(got, [[-4.5, -0.5, -0.5, 0.0, -0.5, -2.0]], atol=1e-6)


def test_log_prob_and_entropy_are_the_normalised_values_per_dimension():
    policy = _policy()
    z = math.exp(-4.5) + 2 * math.exp(-0.5)
    p = [math.exp(-4.5) / z, math.exp(-0.5) / z, math.exp(-0.5) / z]
    with torch.no_grad():
        logp, entropy = policy(_batch([0, 1, 2]))
    np.testing.assert_allclose(logp.numpy()[0], np.log(p), atol=1e-5)
    np.testing.assert_allclose(entropy.numpy()[0], [-sum(q * math.log(q) for q in p)] * 3, atol=1e-5)
    # two dimensions: the joint token 3 d_0 + d_1 is the sum of its dimensions' log-probs
    two = _policy(dims=2)
    with torch.no_grad():
        logp2, entropy2 = two(_batch([3 * 0 + 2]))
    assert float(logp2) == pytest.approx(math.log(p[0]) + math.log(p[2]), abs=1e-5)
    assert float(entropy2) == pytest.approx(2 * float(entropy[0, 0]), abs=1e-5)


def test_the_mean_and_the_log_std_both_learn():
    policy = _policy(bins=5)
    logp, _ = policy(_batch([4]))
    logp.sum().backward()
    assert policy.net[-1].bias.grad.item() > 0  # the top value is above the mean: raise the mean
    assert policy.log_std.grad.item() > 0  # and it lies 1 sigma out: widen


def test_draws_follow_the_distribution_and_greedy_is_the_value_nearest_the_mean():
    policy = _policy(bins=5, mean=0.3, log_std=math.log(0.4))
    obs = torch.zeros(20_000, 1)
    with torch.no_grad():
        probs = torch.softmax(policy.logits(obs[:1]), -1)[0].numpy()
    drawn = policy.act(obs, generator=torch.Generator().manual_seed(0)).numpy()
    np.testing.assert_allclose(np.bincount(drawn, minlength=5) / len(drawn), probs, atol=0.015)
    drawn_np = policy.numpy_actor(np.random.default_rng(0))(obs.numpy())
    np.testing.assert_allclose(np.bincount(drawn_np, minlength=5) / len(drawn_np), probs, atol=0.015)
    # values -1, -.5, 0, .5, 1: the nearest to 0.3 is 0.5
    assert policy.act(obs[:2], greedy=True).tolist() == [3, 3]
    assert policy.numpy_actor(greedy=True)(obs[:2].numpy()).tolist() == [3, 3]


def test_a_gaussian_head_is_refused_without_values_to_weigh():
    with pytest.raises(ValueError, match="action_head must be one of categorical, gaussian"):
        CategoricalMLPPolicy(2, 9, action_nvec=[3, 3], action_head="beta")
    with pytest.raises(ValueError, match="action_head gaussian weighs"):
        CategoricalMLPPolicy(2, 4, action_head="gaussian")  # one categorical over 4 actions
    with pytest.raises(UsageError, match=r"action_head='gaussian'.*Discrete\(2\)"):
        GRPO("MlpPolicy", "CartPole-v1", policy_kwargs=dict(action_head="gaussian"))


def test_the_command_line_refuses_a_gaussian_head_on_discrete_actions(capsys):
    from grpo_seq.cli import commands

    with pytest.raises(SystemExit) as exit_:
        commands.main(["train-env", "--env_id", "CartPole-v1", "--action_head", "gaussian", "--total_env_steps", "100"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1
    assert err[0].startswith("error: --action_head: gaussian") and "Discrete(2)" in err[0]


def test_a_job_trains_a_gaussian_head_and_its_saved_policy_acts_alike(tmp_path):
    from grpo_seq.io.serialization import load_policy
    from grpo_seq.jobs.env import load_actor, run_env_job
    from grpo_seq.jobs.env_spec import EnvJob

    spec = EnvJob(env_id="Pendulum-v1", total_env_steps=1_600, eval_every=0, action_bins=9, action_head="gaussian",
                  log_std_init=-1.0, output_dir=str(tmp_path / "run"), seed=0)
    run_env_job(spec)
    saved = json.loads((tmp_path / "run" / "policy" / "policy.json").read_text())["kwargs"]
    assert saved["action_head"] == "gaussian" and saved["log_std_init"] == -1.0
    policy = load_policy(str(tmp_path / "run" / "policy"))
    assert policy.action_head == "gaussian" and policy.log_std.item() != -1.0  # trained, and saved trained
    obs = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 5.0], [-1.0, 0.0, -3.0]], np.float32)
    _, act = load_actor(tmp_path / "run" / "policy")
    assert act(obs).tolist() == policy.act(torch.as_tensor(obs), greedy=True).tolist()
