"""Groups branched from visited states: where they start, what a copy carries, what it costs."""

import collections

import gymnasium as gym
import numpy as np
import pytest

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler
from grpo_seq.errors import ConfigError, UsageError
from grpo_seq.jobs.env_spec import EnvJob
from grpo_seq.sampling import branching
from grpo_seq.sampling.branching import StateReservoir


def test_the_reservoir_keeps_each_offered_state_alike_and_copies_few():
    # size 1 over 10 offers: each offer is kept with probability 1/10. 2,000 draws: 200 each,
    # sd sqrt(2000 * 0.1 * 0.9) = 13.4, so every count in [150, 250] is a bound near 4 sd.
    counts = collections.Counter()
    res = StateReservoir(1, seed=0)
    env = gym.make("CartPole-v1")
    for _ in range(2000):
        for i in range(10):
            res.offer(env, np.array([i]))
        counts[int(res.take()[0][1][0])] += 1
    assert sorted(counts) == list(range(10)) and all(150 <= c <= 250 for c in counts.values()), counts


def test_the_reservoir_copies_about_log_n_times_not_n(monkeypatch):
    made = []
    monkeypatch.setattr(branching, "clone_env", lambda env: made.append(1) or env)
    res = StateReservoir(2, seed=1)
    for i in range(1000):
        res.offer(None, np.array([i]))
    # algorithm R keeps offer i (i > 2) with probability 2 / i: about 2 (1 + ln(1000 / 2)) = 14.4 copies
    assert len(res.kept) == 2 and 2 <= len(made) <= 40, len(made)


def test_a_kept_copy_stands_still_while_the_env_it_copied_runs_on():
    env = gym.make("Acrobot-v1")
    obs, _ = env.reset(seed=3)
    res = StateReservoir(1, seed=0)
    res.offer(env, obs)
    for _ in range(20):
        env.step(0)
    copy, kept_obs = res.take()[0]
    np.testing.assert_array_equal(kept_obs, obs)
    assert copy.unwrapped.state is not env.unwrapped.state
    assert copy._elapsed_steps == 0 and env._elapsed_steps == 20  # each keeps its own time limit


def test_a_branched_group_starts_inside_an_earlier_episode_with_what_is_left_of_its_time_limit():
    # a group branched from step k of an earlier episode (k steps into its time limit) has
    # 500 - k steps left: an untrained Acrobot policy nearly always runs them all
    policy = CategoricalMLPPolicy(6, 3)
    sampler = EnvGroupSampler("Acrobot-v1", num_groups=2, num_generations=3, seed=0, branch_prob=0.9)
    batch = sampler.sample(policy)
    assert not sampler.last_branched.any()  # nothing visited yet: every group starts at reset
    offsets = [0] * 6  # how far into its time limit each episode of the last batch started
    branched, full = 0, 0
    for _ in range(4):
        seen = {tuple(batch.context[i, t].tolist()): offsets[i] + t
                for i in range(6) for t in range(1, int(batch.mask[i].sum()))}
        batch = sampler.sample(policy)
        offsets = [0] * 6
        for g in range(2):
            rows = range(3 * g, 3 * g + 3)
            if not sampler.last_branched[3 * g]:
                continue
            branched += 1
            start = batch.context[3 * g, 0]
            assert all(np.array_equal(batch.context[i, 0], start) for i in rows)  # one shared state
            k = seen[tuple(start.tolist())]  # a state of the rollout before, inside an episode (k >= 1)
            lengths = [int(batch.mask[i].sum()) for i in rows]
            assert k >= 1 and max(lengths) <= 500 - k, (k, lengths)
            full += max(lengths) == 500 - k
            for i in rows:
                offsets[i] = k
        assert batch.metrics["sampling/branched_groups"] == sampler.last_branched.sum() / 3
    assert branched >= 4 and full >= branched - 1  # 8 draws at 0.9; the time limit carried over


class HoldsALock(gym.Wrapper):
    """An env holding something copy.deepcopy cannot copy (as a simulator handle would be)."""

    def __init__(self, env):
        super().__init__(env)
        import threading

        self.lock = threading.Lock()


def test_an_env_that_cannot_be_copied_is_refused_by_name_before_any_rollout():
    make = lambda: HoldsALock(gym.make("Acrobot-v1"))  # noqa: E731
    with pytest.raises(UsageError, match=r"Acrobot-v1 cannot be cloned to branch groups .*--branch_prob 0"):
        EnvGroupSampler(None, 1, 2, env_fn=make, branch_prob=0.5)
    EnvGroupSampler(None, 1, 2, env_fn=make)  # without branching it is never copied


def test_branching_is_refused_for_envs_stepped_in_place_and_out_of_range():
    with pytest.raises(UsageError, match="env_objects"):
        EnvGroupSampler(None, 1, 2, env_objects=[gym.make("CartPole-v1")], branch_prob=0.5)
    with pytest.raises(ConfigError, match=r"--branch_prob: must be in \[0, 1\)"):
        EnvJob(env_id="Acrobot-v1", branch_prob=1.0)
