"""The environment sampler: shared start states per group, masks that end at termination."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler


def _sample(env_id="CartPole-v1", groups=3, G=4, seed=0, **kw):
    sampler = EnvGroupSampler(env_id, groups, G, seed=seed, **kw)
    torch.manual_seed(0)
    policy = CategoricalMLPPolicy(sampler.obs_dim, sampler.num_actions)
    return sampler, sampler.sample(policy)


@pytest.mark.parametrize("env_id,groups,G", [("CartPole-v1", 3, 4), ("CartPole-v1", 3, 2), ("Acrobot-v1", 3, 4)])
def test_group_members_share_a_start_state_and_groups_differ(env_id, groups, G):
    # 12 CartPole episodes run as one numpy-vectorised env (state copied across the group's
    # rows); 6, and any other env, one env per episode, each reset with its group's seed: both
    # must give the same guarantee.
    sampler, batch = _sample(env_id, groups, G, max_episode_steps=30)
    assert sampler._vector == (env_id == "CartPole-v1" and groups * G >= 8)
    start = batch.context[:, 0].reshape(batch.num_groups, batch.num_generations, -1)
    for g in range(batch.num_groups):
        assert torch.equal(start[g], start[g, :1].expand_as(start[g])), f"group {g} members start apart"
    firsts = start[:, 0]
    assert len({tuple(x.tolist()) for x in firsts}) == batch.num_groups, "two groups share a start state"
    # and the members then diverge (the policy samples), so the group has something to compare
    tokens = batch.tokens.reshape(batch.num_groups, batch.num_generations, -1)
    assert any(not torch.equal(tokens[g, 0], tokens[g, 1]) for g in range(batch.num_groups))


@pytest.mark.parametrize("groups,G", [(4, 4), (2, 2)])  # vectorised, and one env per episode
def test_mask_is_a_prefix_that_ends_at_the_episodes_own_termination(groups, G):
    sampler, batch = _sample(groups=groups, G=G)
    lengths = batch.lengths()
    for i in range(batch.batch_size):
        L = int(lengths[i])
        assert batch.mask[i, :L].all() and not batch.mask[i, L:].any()
        # CartPole pays 1 per real step and nothing after its own end
        assert batch.step_rewards[i].sum() == L == batch.rewards[i]
    # Replay each episode's actions in a plain single env from the same start state:
    # it must terminate exactly at the recorded length, not earlier and not later.
    env = gym.make("CartPole-v1")
    for i in range(batch.batch_size):
        env.reset(seed=0)
        env.unwrapped.state = batch.context[i, 0].double().numpy()
        L = int(lengths[i])
        for t in range(L):
            np.testing.assert_allclose(env.unwrapped.state, batch.context[i, t].numpy(), rtol=1e-5, atol=1e-6)
            _, _, terminated, truncated, _ = env.step(int(batch.tokens[i, t]))
            assert (terminated or truncated) == (t == L - 1), f"episode {i} ends at {t}, recorded {L}"


def test_batch_layout_and_env_step_count():
    sampler, batch = _sample(groups=3, G=4)
    assert batch.tokens.shape == batch.mask.shape == batch.step_rewards.shape
    assert batch.context.shape[:2] == batch.tokens.shape and batch.context.shape[2] == 4
    assert batch.group.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert batch.tokens.max() <= 1 and batch.tokens.min() >= 0
    assert sampler.env_steps == int(batch.mask.sum())


@pytest.mark.parametrize("env_id,groups,G", [("CartPole-v1", 2, 4), ("Acrobot-v1", 1, 8)])  # vectorised; one env each
def test_a_step_budget_is_spread_over_the_episodes_and_the_cut_ones_are_named(env_id, groups, G):
    # 30 steps for 8 episodes: 30 // 8 = 3 each, and the first 30 % 8 = 6 one more: 4 x 6 + 3 x 2 = 30.
    # A random policy keeps every episode going that long (CartPole falls after 8 steps at the soonest).
    sampler = EnvGroupSampler(env_id, groups, G, seed=0)
    sampler.step_budget = 30
    assert sampler.episode_caps().tolist() == [4] * 6 + [3] * 2
    torch.manual_seed(0)
    batch = sampler.sample(CategoricalMLPPolicy(sampler.obs_dim, sampler.num_actions))
    assert batch.lengths().tolist() == [4] * 6 + [3] * 2 and sampler.env_steps == 30
    assert sampler.last_episode_cut == [True] * 8
    sampler.step_budget = None  # no budget: each episode runs to its own end, none is cut
    sampler.sample(CategoricalMLPPolicy(sampler.obs_dim, sampler.num_actions))
    assert sampler.last_episode_cut == [False] * 8


class _Counting(gym.Wrapper):
    """Counts the episodes this one object has started."""

    def __init__(self, env):
        super().__init__(env)
        self.starts = []

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        self.starts.append(obs)
        return obs, info


def test_the_callers_own_env_objects_run_every_episode_in_waves_in_place():
    # 2 groups of 3 on 2 objects: 3 waves of 2 episodes; each object starts 3 episodes, in order
    envs = [_Counting(gym.make("Acrobot-v1", max_episode_steps=20)) for _ in range(2)]
    sampler = EnvGroupSampler("", 2, 3, seed=0, env_objects=envs)
    torch.manual_seed(0)
    batch = sampler.sample(CategoricalMLPPolicy(sampler.obs_dim, sampler.num_actions))
    assert [len(e.starts) for e in envs] == [3, 3] and sampler.env_id == "Acrobot-v1"
    # episode i ran on object i % 2, in wave i // 2; the members of a group share the start state
    for i in range(6):
        np.testing.assert_allclose(batch.context[i, 0].numpy(), envs[i % 2].starts[i // 2], rtol=1e-6)
    start = batch.context[:, 0].reshape(2, 3, -1)
    assert torch.equal(start[0], start[0, :1].expand(3, -1)) and not torch.equal(start[0, 0], start[1, 0])
    assert batch.lengths().tolist() == [20] * 6 and sampler.env_steps == 120


def test_same_seed_same_rollouts_and_new_states_each_call():
    _, a = _sample(seed=3)
    _, b = _sample(seed=3)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.context, b.context)
    sampler, first = _sample(seed=3)
    second = sampler.sample(CategoricalMLPPolicy(4, 2))
    assert not torch.equal(first.context[:, 0], second.context[:, 0])


def test_a_composite_action_space_is_refused_by_name():
    import gymnasium as gym

    from grpo_seq.sampling.env import as_tokens

    class Pair(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))

    with pytest.raises(ValueError, match=r"pair: actions must be Discrete, MultiDiscrete, MultiBinary or a Box .*Tuple"):
        EnvGroupSampler("pair", 1, 2, env_fn=lambda: as_tokens(Pair(), "pair"))


def test_a_box_action_env_plays_values_from_its_bins():
    sampler = EnvGroupSampler("Pendulum-v1", 1, 2, seed=0)
    assert sampler.num_actions == 11 and sampler.env_list[0].codec.action_nvec == [11]


def test_numpy_actor_matches_the_torch_policy():
    """The rollout fast path: greedy actions equal the torch argmax; samples follow softmax(logits)."""
    torch.manual_seed(0)
    policy = CategoricalMLPPolicy(4, 3, (16, 16))
    torch.nn.init.normal_(policy.net[-1].weight, std=1.0)  # a far-from-uniform policy, to test the sampling
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    greedy = policy.numpy_actor(greedy=True)(obs)
    assert np.array_equal(greedy, policy.act(torch.from_numpy(obs), greedy=True).numpy())

    one = np.repeat(obs[:1], 20_000, axis=0)
    draws = policy.numpy_actor(np.random.default_rng(1))(one)
    probs = torch.softmax(policy.logits(torch.from_numpy(obs[:1])), -1)[0].detach().numpy()
    freq = np.bincount(draws, minlength=3) / len(draws)
    np.testing.assert_allclose(freq, probs, atol=0.015)  # ~4 standard errors at n = 20,000
    with pytest.raises(ValueError, match="rng"):
        policy.numpy_actor()


def test_alternatives_sampler_state_goes_through_json_and_back():
    # what a checkpoint keeps of the per-state sampler: its random streams and env-step count
    import json

    from grpo_seq.sampling.alternatives import AlternativesSampler

    make = lambda: gym.make("CartPole-v1")  # noqa: E731
    a = AlternativesSampler(make, num_groups=2, horizon=3, seed=1)
    a.sample(CategoricalMLPPolicy(4, 2))
    state = json.loads(json.dumps(a.state_dict()))
    b = AlternativesSampler(make, num_groups=2, horizon=3, seed=2)
    b.load_state_dict(state)
    assert b.env_steps == a.env_steps > 0
    assert b.rng.integers(2**31) == a.rng.integers(2**31)
    assert b.action_rng.integers(2**31) == a.action_rng.integers(2**31)
