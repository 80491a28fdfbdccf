"""G rollouts per start state from a gymnasium environment, all groups stepping together."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..math.batch import RolloutBatch
from .env_packages import register_namespace
from .env_wrappers import Wrapper, apply_wrappers
from ..errors import UsageError
from ..policies.actor import Actor, make_actor
from .base import ObsTransform, RandomStreams
from .branching import StateReservoir, clone_env
from .novelty import NoveltyBonus
from .snapshot import env_name
from .spaces import CodecWrapper, SpaceCodec
from .start_states import check_same_starts
from .step_reward import StepRewardFn, apply_step_reward

__all__ = ["EnvGroupSampler", "make_vector_env", "make_env", "as_tokens", "action_nvec", "env_spec", "is_registered",
           "check_spaces"]

# Environments whose numpy-vectorised implementation keeps its full state in
# ``unwrapped.state`` shaped (state_dim, num_envs) with the observation equal to the state:
# a group's start state is shared by copying one column over the others.
_STATE_COPY_ENVS = ("CartPole-v0", "CartPole-v1")
# Fewer envs than this step faster one by one: a call of the numpy-vectorised CartPole costs about
# the same whatever the count (a few dozen numpy calls on tiny arrays), several times a single
# CartPoleEnv's step, and only the episodes still running need a call (benchmarks/env_step_cost.py
# measures both on your machine).
_VECTOR_MIN_ENVS = 8


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """``gym.spec(env_id)``; an unknown id is a :class:`UsageError` naming it (as :func:`make_env`).
    ``module:Id-v0`` imports ``module`` first, whose import registers the id, as ``gym.make`` reads it."""
    _register(env_id)
    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        return gym.spec(name)
    except ImportError as e:
        raise UsageError(f"--env_id {env_id}: cannot import {module} ({e}), the module that registers the env") from None
    except gym.error.Error as e:
        raise _refuse_unknown(env_id, e) from None


def is_registered(env_id: str) -> bool:
    """Whether gymnasium knows ``env_id``, once its package (MinAtar, ALE, MiniGrid) has registered it."""
    try:
        env_spec(env_id)
    except UsageError:
        return False
    return True


def _register(env_id: str) -> None:
    """An id of a package that registers its envs on request (MinAtar, ALE): registered first."""
    if isinstance(env_id, str) and env_id not in gym.registry:
        register_namespace(env_id)


def _refuse_unknown(env_id: str, e: gym.error.Error) -> UsageError:
    """gymnasium's error for an id it does not know (or whose package is missing), as one line naming it."""
    return UsageError(f"--env_id {env_id}: gymnasium cannot make it ({type(e).__name__}: {e}); give a registered id "
                      "such as CartPole-v1 (gymnasium.pprint_registry() lists them), or install the env's package")


def make_env(env_id: str, tokens: bool = True, action_bins: int | None = None,
             action_clip: tuple[float, float] | None = None, wrappers: Sequence[Wrapper] = (),
             **kwargs: Any) -> gym.Env:
    """``gym.make(env_id, **kwargs)`` inside ``wrappers`` (:mod:`grpo_seq.sampling.env_wrappers`), seen as
    the policy sees it (:func:`as_tokens`, with a continuous action's ``action_bins`` and
    ``action_clip``; ``tokens=False``: as made); an unknown id or a missing env package is a
    :class:`UsageError` naming it."""
    _register(env_id)
    try:
        env = apply_wrappers(gym.make(env_id, **kwargs), wrappers)
    except gym.error.Error as e:
        raise _refuse_unknown(env_id, e) from None
    return as_tokens(env, env_id, action_bins, action_clip) if tokens else env


def as_tokens(env: gym.Env, name: str, action_bins: int | None = None,
              action_clip: tuple[float, float] | None = None) -> gym.Env:
    """``env`` itself where its observations are a flat Box and its actions ``Discrete(n)`` from 0,
    else inside a :class:`~grpo_seq.sampling.spaces.CodecWrapper`: flat float observations (one-hot
    for discrete ones) and one token per joint action of a ``MultiDiscrete`` or ``MultiBinary``
    space, or of a continuous one cut into ``action_bins`` values per dimension
    (``wrapper.codec.action_nvec``: its dimensions, for a factorised policy head). A space
    neither takes (composite actions, unbounded ones without ``action_clip``) is a
    :class:`UsageError` naming it."""
    codec = SpaceCodec(env.observation_space, env.action_space, name, action_bins, action_clip)
    return env if codec.identity else CodecWrapper(env, codec)


def action_nvec(env: gym.Env) -> list[int] | None:
    """The dimensions of a multi-dimensional action behind :func:`as_tokens` (None: one Discrete)."""
    codec = getattr(env, "codec", None)
    return codec.action_nvec if codec is not None else None


def check_spaces(env_id: str, obs_space: gym.Space, act_space: gym.Space) -> None:
    """Refuse (:class:`UsageError`, naming the space) an env whose actions cannot be tokens or whose
    observations are not a flat vector, what a categorical MLP policy needs."""
    if not isinstance(act_space, gym.spaces.Discrete):
        raise UsageError(f"{env_id}: actions must be Discrete to be tokens, got {act_space} (a continuous or "
                         "composite action space); use an env with Discrete actions or discretise them with a wrapper")
    if not (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1):
        raise UsageError(f"{env_id}: observations must be a flat Box, got {obs_space}; flatten them with "
                         "gymnasium.wrappers.FlattenObservation")


def make_vector_env(env_id: str, num_envs: int, env_kwargs: dict[str, Any] | None = None,
                    action_bins: int | None = None, action_clip: tuple[float, float] | None = None,
                    wrappers: Sequence[Wrapper] = ()) -> tuple[gym.vector.VectorEnv, bool]:
    """The fastest vector env for ``env_id``, each inside ``wrappers``, as tokens (:func:`as_tokens`);
    returns ``(envs, shares_state_by_copy)``. An id gymnasium does not know is a :class:`UsageError`
    naming it."""
    env_kwargs = env_kwargs or {}
    _register(env_id)
    if env_id in _STATE_COPY_ENVS and not wrappers:
        envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **env_kwargs)
        return envs, True
    # a space no policy takes: a UsageError
    wrap = [lambda env: as_tokens(apply_wrappers(env, wrappers), env_id, action_bins, action_clip)]
    try:
        envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync", wrappers=wrap, **env_kwargs)
    except gym.error.Error as e:
        raise _refuse_unknown(env_id, e) from None
    return envs, False


class EnvGroupSampler(RandomStreams):
    """``num_groups`` groups of ``num_generations`` episodes; the members of a group start from the
    same state, different groups from different states.

    Actions are the tokens, observations the context, and the mask marks each episode's own
    steps up to and including its termination or truncation (steps the vector env takes
    after that, autoresets included, never count). Per-step env rewards are kept for process
    supervision; the outcome reward is the episode return.

    Start states: with ``_VECTOR_MIN_ENVS`` or more episodes, environments in
    ``_STATE_COPY_ENVS`` run as one numpy-vectorised env and copy one start state over the
    group's rows. Otherwise each episode has its own ``gym.make`` env (or ``env_fn()`` env), reset
    with its group's seed, and only the episodes still running are stepped.

    ``env_fn`` (instead of ``env_id``): makes each episode's env, for an env that is not
    registered or carries the caller's wrappers. ``env_objects`` (instead of both): the caller's
    own envs, stepped in place; the episodes run in waves of ``len(env_objects)``, one episode
    per object at a time, each reset with its group's seed, so that an env whose episodes depend
    on the ones it has run before (a curriculum, a counter) sees them in order.
    ``obs_transform`` (:class:`~grpo_seq.sampling.base.ObsTransform`): what the policy sees of an
    observation, fixed within a rollout, then updated with the env's own ones (``last_raw_obs``).
    ``reward_fn(state, action, next_state)``: per-step rewards in place of the env's, for training (:mod:`grpo_seq.sampling.step_reward`),
    one call per rollout; the env's own episode returns stay in ``last_episode_returns``.
    ``bonus``: added to each step's training reward (a :class:`~grpo_seq.sampling.novelty.NoveltyBonus`
    breaks ties between members); ``reward/env_return`` is the env's own mean return, without it.
    ``branch_prob``: the chance that a group starts from a state the previous rollout visited (a copy
    of one of its envs at a uniformly drawn step, :mod:`grpo_seq.sampling.branching`), not a reset;
    ``last_branched`` marks those episodes (``reward/env_return`` leaves them out).
    """

    def __init__(self, env_id: str, num_groups: int, num_generations: int, seed: int = 0,
                 max_episode_steps: int | None = None, env_kwargs: dict[str, Any] | None = None,
                 env_fn: Callable[[], gym.Env] | None = None, reward_fn: StepRewardFn | None = None,
                 bonus: NoveltyBonus | None = None, env_objects: list[gym.Env] | None = None,
                 obs_transform: ObsTransform | None = None, branch_prob: float = 0.0):
        if num_generations < 2:
            raise ValueError(f"num_generations must be >= 2, got {num_generations}")
        if num_groups < 1:
            raise ValueError(f"num_groups must be >= 1, got {num_groups}")
        self.env_id, self.num_groups, self.num_generations = env_id, num_groups, num_generations
        self.num_envs = num_groups * num_generations
        self.reward_fn, self.bonus, self.obs_transform = reward_fn, bonus, obs_transform
        self.last_raw_obs: np.ndarray | None = None
        self.last_batch: RolloutBatch | None = None
        if not 0.0 <= branch_prob < 1.0:
            raise ValueError(f"branch_prob must be in [0, 1), got {branch_prob}")
        if branch_prob and env_objects:
            raise UsageError("branch_prob > 0 starts groups on copies of an env, and the envs given are stepped in "
                             "place (env_objects); pass env_fn instead, or branch_prob 0")
        self.branch_prob = branch_prob
        self._vector = env_fn is None and not env_objects and env_id in _STATE_COPY_ENVS \
            and self.num_envs >= _VECTOR_MIN_ENVS and not branch_prob
        self._wave = min(len(env_objects), self.num_envs) if env_objects else self.num_envs
        if self._vector:
            self.envs, _ = make_vector_env(env_id, self.num_envs, env_kwargs)
            obs_space, act_space = self.envs.single_observation_space, self.envs.single_action_space
            spec = self.envs.spec
        else:
            self.env_list = list(env_objects[: self._wave]) if env_objects else \
                [env_fn() if env_fn else make_env(env_id, **(env_kwargs or {})) for _ in range(self.num_envs)]
            obs_space, act_space = self.env_list[0].observation_space, self.env_list[0].action_space
            spec = self.env_list[0].spec
            self.env_id = env_id = env_id or env_name(self.env_list[0])
        check_spaces(env_id, obs_space, act_space)
        check_same_starts(None if self._vector or env_objects else self.env_list, env_id)  # objects run on: unchecked
        if branch_prob:  # an env that cannot be copied is refused now, not at the first branch mid-run
            clone_env(self.env_list[0]).close()
        self.obs_dim, self.num_actions = obs_space.shape[0], int(act_space.n)
        limit = max_episode_steps or (spec.max_episode_steps if spec else None)
        if limit is None:
            raise UsageError(f"{env_id} has no time limit: register it with max_episode_steps, or pass max_episode_steps")
        self.max_episode_steps = int(limit)
        self.rng = np.random.default_rng(seed)
        self.torch_gen = torch.Generator().manual_seed(int(self.rng.integers(2**63 - 1)))
        self.action_rng = np.random.default_rng(int(self.rng.integers(2**63 - 1)))
        # drawn only when branching, so that a run without it keeps its random streams
        self._reservoir = StateReservoir(num_groups, int(self.rng.integers(2**63 - 1))) if branch_prob else None
        self.last_branched = np.zeros(self.num_envs, dtype=bool)
        self.env_steps = 0
        self.last_episode_returns, self.last_episode_lengths, self.last_episode_cut = [], [], []  # EpisodeSampler's
        # the most env steps the next sample may take (None: no cap); the job sets it to what is left of its budget
        self.step_budget: int | None = None

    def _reset_vector(self) -> np.ndarray:
        G = self.num_generations
        self.envs.reset(seed=int(self.rng.integers(2**31 - 1)))
        state = self.envs.unwrapped.state  # (state_dim, num_envs)
        first = state[:, ::G]
        state[:] = np.repeat(first, G, axis=1)
        return state.T.astype(np.float32)

    def _reset(self, group_seeds: np.ndarray, episodes: range, starts: list) -> np.ndarray:
        """Reset the envs of ``episodes`` (the k-th of them on ``env_list[k]``), each with its group's
        seed; a group with a start (``starts``: per group, None or a visited state) gets copies of it."""
        rows = []
        for k, i in enumerate(episodes):
            start = starts[i // self.num_generations]
            if start is None:
                rows.append(self.env_list[k].reset(seed=int(group_seeds[i // self.num_generations]))[0])
            else:
                self.env_list[k].close()
                self.env_list[k] = clone_env(start[0])
                rows.append(start[1])
        return np.stack([np.asarray(r, dtype=np.float32) for r in rows])

    def _branch_starts(self) -> list:
        """Per group: None (a reset) or, with probability ``branch_prob``, one of the states the
        previous rollout's reservoir kept (each given to one group at most)."""
        if self._reservoir is None:
            return [None] * self.num_groups
        pending = self._reservoir.take()
        draws = self.rng.random(self.num_groups) < self.branch_prob
        starts = [pending.pop() if d and pending else None for d in draws]
        self.last_branched = np.repeat([s is not None for s in starts], self.num_generations)
        return starts

    def _roll_vector(self, act: Actor, obs: np.ndarray, obs_buf: np.ndarray, act_buf: np.ndarray,
                     rew_buf: np.ndarray, mask_buf: np.ndarray, caps: np.ndarray) -> int:
        """One numpy-vectorised env for every episode; steps all of them until all have ended or
        reached their cap (``caps``, one per episode)."""
        alive = np.ones(self.num_envs, dtype=bool)
        ended = np.zeros(self.num_envs, dtype=bool)
        t = 0
        while t < len(act_buf) and alive.any():
            obs_buf[t], mask_buf[t] = obs, alive
            act_buf[t] = actions = act(self._view(obs))
            running = alive.copy()
            obs, reward, terminated, truncated, _ = self.envs.step(actions)
            ended |= running & (terminated | truncated)
            alive &= ~(terminated | truncated) & (t + 1 < caps)
            rew_buf[t] = np.where(running, reward, 0.0)
            t += 1
        obs_buf[t] = obs  # the last next-observation (a reward_fn's next_state)
        self.last_episode_cut += (~ended & (caps < self.max_episode_steps)).tolist()
        return t

    def _roll_one_by_one(self, act: Actor, obs: np.ndarray, obs_buf: np.ndarray, act_buf: np.ndarray,
                         rew_buf: np.ndarray, mask_buf: np.ndarray, caps: np.ndarray) -> int:
        """One gym env per episode, stepped only while its episode runs. The per-step work is kept
        to the env calls and one actor call: with 2 episodes the bookkeeping around them cost
        as much as the env steps themselves."""
        running = list(range(len(caps)))
        lengths = caps.tolist()  # an episode still running at its cap fills its share of the buffer
        cut = [False] * len(caps)
        keep = self._reservoir
        t = 0
        while t < len(act_buf) and running:
            obs_buf[t] = obs
            actions = act(self._view(obs))
            act_buf[t] = actions
            still = []
            for i in running:
                if keep is not None and t:  # a state inside an episode, before its step: one to branch from
                    keep.offer(self.env_list[i], obs[i])
                # A numpy integer, not a Python int: Discrete.contains checks an int's range
                # through np.iinfo, a quarter of a CartPole step (benchmarks/env_step_cost.py).
                o, r, terminated, truncated, _ = self.env_list[i].step(actions[i])
                obs[i], rew_buf[t, i] = o, r
                if terminated or truncated:
                    lengths[i] = t + 1
                elif t + 1 >= caps[i]:
                    cut[i] = caps[i] < self.max_episode_steps
                else:
                    still.append(i)
            running = still
            t += 1
        # The mask from the lengths once, rather than a fancy-indexed write at every step.
        mask_buf[:t] = np.arange(t)[:, None] < np.asarray(lengths)[None, :]
        obs_buf[t] = obs  # the last next-observation (a reward_fn's next_state)
        self.last_episode_cut += cut
        return t

    def _roll_waves(self, act: Actor, obs_buf: np.ndarray, act_buf: np.ndarray, rew_buf: np.ndarray,
                    mask_buf: np.ndarray, caps: np.ndarray) -> int:
        """Every episode, ``len(env_list)`` at a time (all at once unless the envs are the caller's
        own objects); returns the most steps any took. Each wave writes its own columns of the buffers."""
        group_seeds = self.rng.integers(2**31 - 1, size=self.num_groups)
        starts = self._branch_starts()
        t = 0
        for a in range(0, self.num_envs, self._wave):
            cols = slice(a, min(a + self._wave, self.num_envs))
            obs = self._reset(group_seeds, range(cols.start, cols.stop), starts)
            t = max(t, self._roll_one_by_one(act, obs, obs_buf[:, cols], act_buf[:, cols], rew_buf[:, cols],
                                             mask_buf[:, cols], caps[cols]))
        return t

    def _view(self, obs: np.ndarray) -> np.ndarray:
        return obs if self.obs_transform is None else self.obs_transform(obs)

    def _transform_context(self, obs_buf: np.ndarray, mask: np.ndarray, t: int) -> None:
        """The policy's view of every stored observation, in place (the transform is fixed within a
        rollout, so this is what the actor saw); the env's own real ones, ``last_raw_obs``, move it."""
        self.last_raw_obs = obs_buf[:t].transpose(1, 0, 2)[mask.T]  # episode by episode, as the batch's rows
        flat = obs_buf[: t + 1].reshape(-1, self.obs_dim)
        obs_buf[: t + 1] = self.obs_transform(flat).reshape(t + 1, -1, self.obs_dim)
        self.obs_transform.update(self.last_raw_obs)

    def _check_finite(self, obs: np.ndarray, rewards: np.ndarray) -> None:
        """Name the first step with a NaN or inf; checked once per rollout, not at every step."""
        bad_obs = ~np.isfinite(obs).all(axis=(1, 2))
        bad_rew = ~np.isfinite(rewards).all(axis=1)
        if not (bad_obs.any() or bad_rew.any()):
            return
        t_obs = int(bad_obs.argmax()) if bad_obs.any() else len(obs)
        t_rew = int(bad_rew.argmax()) if bad_rew.any() else len(obs)
        if t_obs <= t_rew:  # the observation of step t comes before that step's reward
            row = obs[t_obs][~np.isfinite(obs[t_obs]).all(1)][0]
            raise UsageError(
                f"{self.env_id} returned a non-finite observation (NaN or inf) at step {t_obs} of an episode: "
                f"{row.tolist()}; fix the environment, or wrap it (gymnasium.wrappers.TransformObservation) "
                "so that the policy only sees finite numbers"
            )
        raise UsageError(
            f"{self.env_id} returned a non-finite reward (NaN or inf) at step {t_rew} of an episode; "
            "fix the environment, or wrap it (gymnasium.wrappers.TransformReward) to keep rewards finite"
        )

    @torch.no_grad()
    def sample(self, policy: nn.Module) -> RolloutBatch:
        """One rollout of every episode. Under a :attr:`step_budget` each episode is cut (as truncated)
        at its share of the budget (:meth:`episode_caps`), so the rollout takes at most the budget;
        ``last_episode_cut`` says which episodes were cut so."""
        n, caps = self.num_envs, self.episode_caps()
        T = int(caps.max())
        obs_buf = np.zeros((T + 1, n, self.obs_dim), dtype=np.float32)  # row t + 1: step t's next state
        act_buf = np.zeros((T, n), dtype=np.int64)
        rew_buf = np.zeros((T, n), dtype=np.float32)
        mask_buf = np.zeros((T, n), dtype=bool)
        act = make_actor(policy, self.action_rng, self.torch_gen)
        self.last_episode_cut = []
        if self._vector:
            t = self._roll_vector(act, self._reset_vector(), obs_buf, act_buf, rew_buf, mask_buf, caps)
        else:
            t = self._roll_waves(act, obs_buf, act_buf, rew_buf, mask_buf, caps)
        self._check_finite(obs_buf[:t], rew_buf[:t])
        self.last_episode_returns = rew_buf[:t].sum(0).tolist()
        self.last_episode_lengths = mask_buf[:t].sum(0).tolist()
        if self.reward_fn is not None:
            rew_buf[:t] = self._user_rewards(obs_buf, act_buf, mask_buf[:t], t)
        if self.obs_transform is not None:
            self._transform_context(obs_buf, mask_buf[:t], t)
        if self.bonus is not None:
            rew_buf[:t] += self.bonus(obs_buf[1 : t + 1], mask_buf[:t])
        mask = torch.from_numpy(np.ascontiguousarray(mask_buf[:t].T))
        step_rewards = torch.from_numpy(np.ascontiguousarray(rew_buf[:t].T))
        self.env_steps += int(mask.sum())
        metrics = {"reward/env_return": float(np.mean(self.last_episode_returns))}
        if self._reservoir is not None:  # a branched episode's return counts from its branch state only
            from_reset = [r for r, b in zip(self.last_episode_returns, self.last_branched) if not b]
            metrics = {"reward/env_return": float(np.mean(from_reset))} if from_reset else {}
            metrics["sampling/branched_groups"] = float(self.last_branched.sum() // self.num_generations)
        self.last_batch = RolloutBatch(
            context=torch.from_numpy(np.ascontiguousarray(obs_buf[:t].transpose(1, 0, 2))),
            tokens=torch.from_numpy(np.ascontiguousarray(act_buf[:t].T)),
            mask=mask,
            group=torch.arange(self.num_groups).repeat_interleave(self.num_generations),
            num_generations=self.num_generations,
            rewards=step_rewards.sum(-1),
            step_rewards=step_rewards,
            metrics=metrics,
        )
        return self.last_batch

    def episode_caps(self) -> np.ndarray:
        """The steps each episode of the next rollout may take: the time limit, or under a budget
        of ``B`` env steps for ``n`` episodes ``B // n``, with the first ``B % n`` episodes one step
        more, so that a cut rollout takes the whole budget (100 steps for 8 episodes: 13 x 4 + 12 x 4)."""
        n = self.num_envs
        if self.step_budget is None:
            return np.full(n, self.max_episode_steps)
        if self.step_budget < n:
            raise ValueError(f"a step budget of {self.step_budget} env steps cannot hold {n} episodes")
        share = self.step_budget // n + (np.arange(n) < self.step_budget % n)
        return np.minimum(self.max_episode_steps, share)

    def _user_rewards(self, obs_buf: np.ndarray, act_buf: np.ndarray, mask: np.ndarray, t: int) -> np.ndarray:
        """``reward_fn``'s rewards ``(t, n)`` on every real step, in one call; 0 after an episode's end."""
        rewards = np.zeros(mask.shape, dtype=np.float32)
        rewards[mask] = apply_step_reward(self.reward_fn, obs_buf[:t][mask], act_buf[:t][mask], obs_buf[1 : t + 1][mask])
        return rewards

    def state_dict(self) -> dict[str, Any]:
        """Where the sampler's random streams stand (JSON-able), for checkpoints: every start
        state comes from a reset seeded by ``rng``, so this and the bonus's counts are all a
        resumed run needs."""
        state = {**super().state_dict(), "bonus": self.bonus.state_dict() if self.bonus is not None else None}
        if self._reservoir is not None:
            state["branching"] = self._reservoir.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.bonus is not None and state.get("bonus") is not None:
            self.bonus.load_state_dict(state["bonus"])
        if self._reservoir is not None and state.get("branching") is not None:
            self._reservoir.load_state_dict(state["branching"])

    def close(self) -> None:
        for env in [self.envs] if self._vector else self.env_list:
            env.close()
