"""Per-state alternatives, really simulated: the group is the set of actions tried at one state.

At states the current policy visits, the environment is copied (:class:`Snapshotter`) and every
alternative action (all discrete actions, or G drawn from the policy) is stepped for real from
that same state, then continued with the current policy for up to ``horizon - 1`` more steps.
Each alternative is scored by its discounted return over those steps (the env's rewards, or
``reward_fn(s, a, s')`` in their place), and the loss acts on the action at that state: a batch
row's "completion" is one token, the alternative, with the state as its context.

Scoring every alternative against the one next state the policy actually reached (what some
packages do) gives every member the same score and every advantage exactly 0; here each has its
own next state. With the env's reward and ``horizon=1`` on CartPole (1 per step whatever the
action) the scores still tie: use ``horizon > 1`` or a ``reward_fn`` that sees the next state.
"""

from __future__ import annotations

from typing import Callable

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..math.batch import RolloutBatch
from ..errors import UsageError
from ..policies.actor import Actor, make_actor
from .base import RandomStreams
from .snapshot import Snapshotter, env_name
from .step_reward import StepRewardFn, apply_step_reward

__all__ = ["AlternativesSampler"]


class AlternativesSampler(RandomStreams):
    """``num_groups`` states per call, each with ``num_generations`` alternatives (a :class:`GroupSampler`).

    Args:
        env_fn: makes the environment the policy walks (called once).
        num_groups: states (groups) per call; the walk moves ``stride`` policy steps between them.
        num_generations: alternatives per state; ``None`` tries every discrete action once.
        horizon: env steps per alternative: its own action, then ``horizon - 1`` policy steps.
        gamma: discount over the horizon.
        reward_fn: ``reward_fn(state, action, next_state)`` in place of the env's reward
            (:mod:`grpo_seq.sampling.step_reward`), applied once per call to every transition.

    A checkpoint (``state_dict``) keeps the random streams and the env-step counter, not the
    walk's env state: a resumed run starts a new walk.
    """

    def __init__(self, env_fn: Callable[[], gym.Env], num_groups: int, num_generations: int | None = None,
                 horizon: int = 1, gamma: float = 1.0, seed: int = 0, reward_fn: StepRewardFn | None = None,
                 stride: int = 1):
        self.env = env_fn()
        self.name = env_name(self.env)
        act_space = self.env.action_space
        if not isinstance(act_space, gym.spaces.Discrete):
            raise UsageError(f"{self.name}: actions must be Discrete to try each one, got {act_space}")
        self.num_actions = int(act_space.n)
        self.obs_dim = int(self.env.observation_space.shape[0])
        self.enumerate = num_generations is None
        self.num_generations = self.num_actions if num_generations is None else int(num_generations)
        if self.num_generations < 2:
            raise UsageError(f"AlternativesSampler: a group needs at least 2 alternatives, got {self.num_generations}")
        if num_groups < 1 or horizon < 1 or stride < 1:
            raise UsageError(f"AlternativesSampler: num_groups, horizon and stride must be >= 1, got "
                             f"{num_groups}, {horizon}, {stride}")
        self.num_groups, self.horizon, self.gamma, self.stride = num_groups, horizon, gamma, stride
        self.reward_fn = reward_fn
        self.snapshots = Snapshotter(self.env)
        self.rng = np.random.default_rng(seed)
        self.action_rng = np.random.default_rng(int(self.rng.integers(2**63 - 1)))
        self.torch_gen = torch.Generator().manual_seed(int(self.rng.integers(2**63 - 1)))
        self.env_steps = 0
        self.num_envs = 1  # one env walks; the alternatives branch from its snapshots
        self.last_batch: RolloutBatch | None = None
        self.last_episode_returns: list[float] = []
        self.last_episode_lengths: list[int] = []
        self.last_episode_cut: list[bool] = []  # never cut: the walk's episodes end as the env ends them
        self._obs = self._reset()

    def _reset(self) -> np.ndarray:
        self._ep_return, self._ep_len = 0.0, 0
        return np.asarray(self.env.reset(seed=int(self.rng.integers(2**31 - 1)))[0], dtype=np.float32)

    def _first_actions(self, act: Actor, obs: np.ndarray) -> np.ndarray:
        if self.enumerate:
            return np.arange(self.num_actions)
        return act(np.repeat(obs[None], self.num_generations, axis=0))

    def _try_alternatives(self, act: Actor, obs: np.ndarray, g: int, out: dict[str, list]) -> np.ndarray:
        """Step each alternative from ``obs`` for up to ``horizon`` steps; returns the first actions and
        appends every transition (state, action, next state, env reward, row, discount) to ``out``."""
        G = self.num_generations
        first = self._first_actions(act, obs)
        envs = self.snapshots.copies(self.env, G)
        states = np.repeat(obs[None], G, axis=0)
        alive = np.arange(G)
        for h in range(self.horizon):
            actions = first[alive] if h == 0 else act(states[alive])
            still = []
            for i, a in zip(alive, actions):
                o, r, terminated, truncated, _ = envs[i].step(a)
                out["s"].append(states[i].copy()), out["a"].append(int(a)), out["s2"].append(o)
                out["r"].append(float(r)), out["row"].append(g * G + i), out["disc"].append(self.gamma**h)
                states[i] = o
                if not (terminated or truncated):
                    still.append(i)
            self.env_steps += len(alive)
            alive = np.asarray(still, dtype=np.int64)
            if not len(alive):
                break
        return first

    def _walk(self, act: Actor) -> None:
        """Move the policy's own walk ``stride`` steps on, starting a new episode where one ends."""
        for _ in range(self.stride):
            o, r, terminated, truncated, _ = self.env.step(act(self._obs[None])[0])
            self.env_steps += 1
            self._ep_return += float(r)
            self._ep_len += 1
            self._obs = np.asarray(o, dtype=np.float32)
            if terminated or truncated:
                self.last_episode_returns.append(self._ep_return)
                self.last_episode_lengths.append(self._ep_len)
                self.last_episode_cut.append(False)
                self._obs = self._reset()

    def _scores(self, out: dict[str, list]) -> np.ndarray:
        """Each alternative's discounted return over its steps, in one reward_fn call for all of them."""
        if self.reward_fn is not None:
            rewards = apply_step_reward(self.reward_fn, np.stack(out["s"]), np.asarray(out["a"]), np.stack(out["s2"]))
        else:
            rewards = np.asarray(out["r"], dtype=np.float32)
        scores = np.zeros(self.num_groups * self.num_generations, dtype=np.float64)
        np.add.at(scores, np.asarray(out["row"]), rewards * np.asarray(out["disc"]))
        if not np.isfinite(scores).all():
            raise UsageError(f"{self.name} returned a non-finite reward (NaN or inf) while stepping an alternative")
        return scores.astype(np.float32)

    @torch.no_grad()
    def sample(self, policy: nn.Module) -> RolloutBatch:
        n, G = self.num_groups, self.num_generations
        act = make_actor(policy, self.action_rng, self.torch_gen)
        states = np.zeros((n, self.obs_dim), dtype=np.float32)
        tokens = np.zeros((n, G), dtype=np.int64)
        out: dict[str, list] = {k: [] for k in ("s", "a", "s2", "r", "row", "disc")}
        self.last_episode_returns, self.last_episode_lengths, self.last_episode_cut = [], [], []
        for g in range(n):
            states[g] = self._obs
            tokens[g] = self._try_alternatives(act, self._obs, g, out)
            self._walk(act)
        scores = torch.from_numpy(self._scores(out))
        B = n * G
        self.last_batch = RolloutBatch(
            context=torch.from_numpy(np.repeat(states, G, axis=0)).reshape(B, 1, self.obs_dim),
            tokens=torch.from_numpy(tokens.reshape(B, 1)),
            mask=torch.ones(B, 1, dtype=torch.bool),
            group=torch.arange(n).repeat_interleave(G),
            num_generations=G,
            rewards=scores,
            step_rewards=scores.reshape(B, 1).clone(),
        )
        return self.last_batch

    def close(self) -> None:
        self.env.close()
