"""PolicyEvaluator: greedy episodes on their own seed stream, the same returns for the same policy."""

import numpy as np
import torch

from grpo_seq import CategoricalMLPPolicy
from grpo_seq.scoring.evaluation import PolicyEvaluator, eval_stream_seed


class AlwaysLeft(torch.nn.Module):
    def act(self, obs, generator=None, greedy=False):
        return torch.zeros(len(obs), dtype=torch.long)


def test_greedy_returns_repeat_for_a_seed_and_follow_the_stream():
    torch.manual_seed(0)
    policy = CategoricalMLPPolicy(4, 2)
    ev = PolicyEvaluator("CartPole-v1", num_episodes=3, seed=7)
    first = ev(policy)
    assert ev.last_seed == 7 and first.shape == (3,)
    ev(policy)
    assert ev.last_seed == 10  # the next evaluation starts past the 3 seeds the first one used
    np.testing.assert_array_equal(ev(policy, seed=7), first)


def test_successive_evaluations_never_replay_a_start_state():
    ev = PolicyEvaluator("MountainCar-v0", num_episodes=5, seed=100)
    starts = set()
    for _ in range(4):
        ev(AlwaysLeft())
        obs, _ = ev.envs.reset(seed=ev.last_seed)  # the start states that evaluation played
        starts |= {float(x) for x in obs[:, 0]}  # MountainCar starts at rest: the position tells them apart
    assert len(starts) == 20  # 4 evaluations x 5 episodes, every start state new (a stride of 1 gives 8)


def test_runs_of_neighbouring_seeds_evaluate_on_different_start_states():
    assert (eval_stream_seed(0), eval_stream_seed(3)) == (10_000, 3_010_000)
    starts = {}
    for run_seed in (100, 101):
        ev = PolicyEvaluator("MountainCar-v0", num_episodes=5, seed=eval_stream_seed(run_seed))
        ev(AlwaysLeft())
        obs, _ = ev.envs.reset(seed=ev.last_seed)
        starts[run_seed] = {float(x) for x in obs[:, 0]}
    # seeds 10_000 + run_seed shared 4 of these 5 starts (the same list shifted by one episode)
    assert not starts[100] & starts[101]


def test_always_pushing_left_falls_within_a_few_dozen_steps():
    # pushing one way topples CartPole in well under 50 steps from any start state
    returns = PolicyEvaluator("CartPole-v1", num_episodes=4, seed=0)(AlwaysLeft())
    assert ((returns > 5) & (returns < 50)).all()


def test_a_policy_cut_into_other_bins_than_the_evaluated_env_is_refused():
    import pytest

    from grpo_seq.errors import ConfigError

    three = CategoricalMLPPolicy(3, 3, action_nvec=[3])  # Pendulum's torque in 3 values
    with pytest.raises(ConfigError, match="picks among 3 actions, but Pendulum-v1 as evaluated here has 11"):
        PolicyEvaluator("Pendulum-v1", num_episodes=1)(three)
    assert PolicyEvaluator("Pendulum-v1", num_episodes=1, action_bins=3)(three).shape == (1,)


def test_sampled_evaluations_repeat_for_a_seed_and_differ_from_greedy_ones():
    torch.manual_seed(0)
    policy = CategoricalMLPPolicy(4, 2)  # untrained: near-even odds, so sampling changes the episodes
    sampled = PolicyEvaluator("CartPole-v1", num_episodes=6, greedy=False)
    first, again = sampled(policy, seed=7), sampled(policy, seed=7)
    assert np.array_equal(first, again)  # the draws come from the evaluation's seed
    assert not np.array_equal(first, PolicyEvaluator("CartPole-v1", num_episodes=6)(policy, seed=7))
    assert not np.array_equal(first, sampled(policy, seed=8))


def test_minigrid_evaluates_sampled_actions_by_default_and_other_envs_greedy():
    from grpo_seq.jobs.env import eval_greedy
    from grpo_seq.jobs.env_spec import EnvJob

    assert EnvJob(env_id="MiniGrid-DoorKey-5x5-v0").eval_greedy is False and eval_greedy("BabyAI-GoToLocal-v0") is False
    assert EnvJob(env_id="CartPole-v1").eval_greedy is True and EnvJob(env_id="LunarLander-v3").eval_greedy is True
    assert EnvJob(env_id="MiniGrid-DoorKey-5x5-v0", eval_greedy=True).eval_greedy is True
    assert eval_greedy("MiniGrid-DoorKey-5x5-v0", True) is True
