"""--obs_norm: running moments merged exactly, the policy's units moved to them over real steps
only, saved with the policy, and a resumed run repeating an uninterrupted one."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from safetensors.torch import load_file

from grpo_seq.errors import ConfigError
from grpo_seq.jobs.env import run_env_job
from grpo_seq.jobs.env_spec import EnvJob
from grpo_seq.jobs.obs_norm import ObsNorm
from grpo_seq.math.running_moments import RunningMoments
from grpo_seq.policies.mlp import CategoricalMLPPolicy


def test_moments_merged_batch_by_batch_equal_the_whole_rows():
    m = RunningMoments()
    m.merge(3, [2.0], [2.0])  # 1, 2, 3: mean 2, M2 = 1 + 0 + 1
    m.merge(2, [4.5], [0.5])  # 4, 5: mean 4.5, M2 = 0.25 + 0.25
    # merged: M2 = 2 + 0.5 + 2.5^2 * 3 * 2 / 5 = 10; 1..5 directly: mean 3, (4 + 1 + 0 + 1 + 4) / 5 = 2
    assert m.count == 5 and m.mean.tolist() == [3.0] and m.var.tolist() == pytest.approx([2.0])
    back = RunningMoments.from_state(json.loads(json.dumps(m.state_dict())))
    assert back.count == 5 and back.var.tolist() == pytest.approx([2.0])


def test_units_follow_the_masked_steps_only_and_are_saved_with_the_policy():
    policy = CategoricalMLPPolicy(2, 2, hidden_sizes=(8,))
    norm = ObsNorm(policy, Accelerator(cpu=True))
    # two real steps and one padding step (its 100s must not count); the second dimension never moves
    batch = SimpleNamespace(context=torch.tensor([[[1.0, 10.0], [3.0, 10.0], [100.0, 100.0]]]),
                            mask=torch.tensor([[True, True, False]]))
    norm.observe(batch)
    assert policy.init_kwargs["obs_shift"] == [2.0, 10.0]
    assert policy.init_kwargs["obs_scale"] == [1.0, 1.0]  # std 1; a still dimension keeps 1
    obs = torch.tensor([[4.0, 12.0]])
    # the torch logits and the numpy actor both see (obs - shift) / scale = [2, 2]
    assert torch.allclose(policy.logits(obs), policy.net(torch.tensor([[2.0, 2.0]])))
    greedy = policy.numpy_actor(greedy=True)
    assert greedy(obs.numpy()).tolist() == policy.act(obs, greedy=True).tolist()


def test_an_image_policy_is_refused_by_name():
    policy = CategoricalMLPPolicy(3 * 8 * 8, 2, hidden_sizes=(8,), image_shape=(3, 8, 8), image_scale=255.0)
    with pytest.raises(ConfigError, match="--obs_norm: for observations of numbers"):
        ObsNorm(policy, Accelerator(cpu=True))


def test_obs_norm_with_given_units_is_refused_unless_the_family_set_it():
    with pytest.raises(ConfigError, match="--obs_norm: moves the units itself"):
        EnvJob(env_id="Pendulum-v1", obs_norm=True, obs_scale=[1.0, 1.0, 8.0])
    assert EnvJob(env_id="Pendulum-v1", obs_scale=[1.0, 1.0, 8.0]).obs_norm is False
    with pytest.raises(ConfigError, match="--obs_norm: moves the policy's units, and --ref_sync_steps"):
        EnvJob(env_id="Pendulum-v1", obs_norm=True, beta=0.1, ref_sync_steps=10)


def _spec(out, steps, **kw):
    # a step is one group of four 200-step episodes; a constant rate, so a shorter budget trains alike
    return EnvJob(env_id="Pendulum-v1", obs_norm=True, total_env_steps=steps, eval_every=0, num_groups=1,
                  lr_schedule="constant", output_dir=str(out), seed=0, **kw)


def test_a_resumed_run_takes_its_units_back_and_ends_as_an_uninterrupted_one(tmp_path):
    run_env_job(_spec(tmp_path / "whole", 1_600))
    run_env_job(_spec(tmp_path / "cut", 800))
    run_env_job(_spec(tmp_path / "cut", 1_600, resume_from=str(tmp_path / "cut")))
    a, b = (json.loads((tmp_path / d / "policy/policy.json").read_text())["kwargs"] for d in ("whole", "cut"))
    assert a["obs_shift"] == b["obs_shift"] and a["obs_scale"] == b["obs_scale"]
    assert a["obs_shift"] != [0.0, 0.0, 0.0] and len(set(a["obs_scale"])) == 3  # moved from random play's
    wa, wb = load_file(tmp_path / "whole/policy/model.safetensors"), load_file(tmp_path / "cut/policy/model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
