"""make_actor: the numpy actor where a policy has one, else its torch act()."""

import numpy as np
import pytest
import torch

from grpo_seq.policies import CategoricalMLPPolicy, make_actor


def test_greedy_numpy_and_torch_paths_agree():
    torch.manual_seed(0)
    policy = CategoricalMLPPolicy(4, 3, (8,))
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    want = policy.act(torch.from_numpy(obs), greedy=True).numpy()
    assert (make_actor(policy, greedy=True)(obs) == want).all()


class TorchOnly(torch.nn.Module):
    """A policy without a numpy actor: always picks action 1 unless sampling."""

    def act(self, obs, generator=None, greedy=False):
        return torch.ones(len(obs), dtype=torch.long) if greedy else torch.zeros(len(obs), dtype=torch.long)


def test_a_policy_without_numpy_actor_uses_act():
    obs = np.zeros((3, 2), np.float32)
    assert make_actor(TorchOnly(), greedy=True)(obs).tolist() == [1, 1, 1]
    assert make_actor(TorchOnly())(obs).tolist() == [0, 0, 0]


def test_a_module_that_cannot_act_is_named():
    with pytest.raises(TypeError, match="Linear cannot act in an environment"):
        make_actor(torch.nn.Linear(2, 2))
