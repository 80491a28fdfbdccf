"""G rollouts per start state from a gymnasium environment, all groups stepping together."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..batch import RolloutBatch

__all__ = ["EnvGroupSampler", "make_vector_env"]

# Environments whose numpy-vectorised implementation keeps its full state in
# ``unwrapped.state`` shaped (state_dim, num_envs) with the observation equal to the state:
# a group's start state is shared by copying one column over the others.
_STATE_COPY_ENVS = ("CartPole-v0", "CartPole-v1")


def make_vector_env(env_id: str, num_envs: int, env_kwargs: dict[str, Any] | None = None) -> tuple[gym.vector.VectorEnv, bool]:
    """The fastest vector env for ``env_id``; returns ``(envs, shares_state_by_copy)``."""
    env_kwargs = env_kwargs or {}
    if env_id in _STATE_COPY_ENVS:
        envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **env_kwargs)
        return envs, True
    envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync", **env_kwargs)
    return envs, False


class EnvGroupSampler:
    """``num_groups`` groups of ``group_size`` episodes; the members of a group start from the
    same state, different groups from different states.

    Actions are the tokens, observations the context, and the mask marks each episode's own
    steps up to and including its termination or truncation (steps the vector env takes
    after that, autoresets included, never count). Per-step env rewards are kept for process
    supervision; the outcome reward is the episode return.

    Start states: environments in ``_STATE_COPY_ENVS`` use the numpy-vectorised env and copy
    one start state over the group's rows; any other environment is reset with the same seed
    for every member of a group (a ``SyncVectorEnv``).
    """

    def __init__(
        self,
        env_id: str,
        num_groups: int,
        group_size: int,
        seed: int = 0,
        max_episode_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
    ):
        if group_size < 2:
            raise ValueError(f"group_size must be >= 2, got {group_size}")
        if num_groups < 1:
            raise ValueError(f"num_groups must be >= 1, got {num_groups}")
        self.env_id, self.num_groups, self.group_size = env_id, num_groups, group_size
        self.num_envs = num_groups * group_size
        self.envs, self._copy_state = make_vector_env(env_id, self.num_envs, env_kwargs)
        obs_space, act_space = self.envs.single_observation_space, self.envs.single_action_space
        if not isinstance(act_space, gym.spaces.Discrete):
            raise ValueError(f"{env_id}: actions must be Discrete to be tokens, got {act_space}")
        if not (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1):
            raise ValueError(f"{env_id}: observations must be a flat Box, got {obs_space}")
        self.obs_dim, self.num_actions = obs_space.shape[0], int(act_space.n)
        limit = max_episode_steps or (self.envs.spec.max_episode_steps if self.envs.spec else None)
        if limit is None:
            raise ValueError(f"{env_id} has no time limit: pass max_episode_steps")
        self.max_episode_steps = int(limit)
        self.rng = np.random.default_rng(seed)
        self.torch_gen = torch.Generator().manual_seed(int(self.rng.integers(2**63 - 1)))
        self.action_rng = np.random.default_rng(int(self.rng.integers(2**63 - 1)))
        self.env_steps = 0

    def _reset(self) -> np.ndarray:
        G = self.group_size
        if self._copy_state:
            obs, _ = self.envs.reset(seed=int(self.rng.integers(2**31 - 1)))
            state = self.envs.unwrapped.state  # (state_dim, num_envs)
            first = state[:, ::G]
            state[:] = np.repeat(first, G, axis=1)
            return state.T.astype(np.float32)
        group_seeds = self.rng.integers(2**31 - 1, size=self.num_groups)
        obs, _ = self.envs.reset(seed=[int(s) for s in np.repeat(group_seeds, G)])
        return np.asarray(obs, dtype=np.float32)

    @torch.no_grad()
    def sample(self, policy: nn.Module) -> RolloutBatch:
        n, T = self.num_envs, self.max_episode_steps
        obs_buf = np.zeros((T, n, self.obs_dim), dtype=np.float32)
        act_buf = np.zeros((T, n), dtype=np.int64)
        rew_buf = np.zeros((T, n), dtype=np.float32)
        mask_buf = np.zeros((T, n), dtype=bool)
        alive = np.ones(n, dtype=bool)
        obs = self._reset()
        if hasattr(policy, "numpy_actor"):  # fast path: numpy weights for the per-step calls
            act = policy.numpy_actor(self.action_rng)
        else:
            def act(o: np.ndarray) -> np.ndarray:
                return policy.act(torch.from_numpy(o), generator=self.torch_gen).numpy()
        t = 0
        while t < T and alive.any():
            if not np.isfinite(obs).all():
                raise ValueError(
                    f"{self.env_id} returned a non-finite observation (NaN or inf) at step {t} of an episode: "
                    f"{obs[~np.isfinite(obs).all(1)][0].tolist()}; fix the environment, or wrap it "
                    "(gymnasium.wrappers.TransformObservation) so that the policy only sees finite numbers"
                )
            obs_buf[t] = obs
            mask_buf[t] = alive
            actions = act(obs)
            act_buf[t] = actions
            obs, reward, terminated, truncated, _ = self.envs.step(actions)
            rew_buf[t] = np.where(alive, reward, 0.0)
            if not np.isfinite(rew_buf[t]).all():
                raise ValueError(
                    f"{self.env_id} returned a non-finite reward (NaN or inf) at step {t} of an episode; "
                    "fix the environment, or wrap it (gymnasium.wrappers.TransformReward) to keep rewards finite"
                )
            alive &= ~(terminated | truncated)
            t += 1
        mask = torch.from_numpy(np.ascontiguousarray(mask_buf[:t].T))
        step_rewards = torch.from_numpy(np.ascontiguousarray(rew_buf[:t].T))
        self.env_steps += int(mask.sum())
        return RolloutBatch(
            context=torch.from_numpy(np.ascontiguousarray(obs_buf[:t].transpose(1, 0, 2))),
            tokens=torch.from_numpy(np.ascontiguousarray(act_buf[:t].T)),
            mask=mask,
            group=torch.arange(self.num_groups).repeat_interleave(self.group_size),
            group_size=self.group_size,
            rewards=step_rewards.sum(-1),
            step_rewards=step_rewards,
        )

    def state_dict(self) -> dict[str, Any]:
        """Where the sampler's random streams stand (JSON-able), for checkpoints: every start
        state comes from a reset seeded by ``rng``, so this is all a resumed run needs."""
        return {"rng": self.rng.bit_generator.state, "action_rng": self.action_rng.bit_generator.state,
                "torch_gen": self.torch_gen.get_state().tolist(), "env_steps": self.env_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.action_rng.bit_generator.state = state["action_rng"]
        self.torch_gen.set_state(torch.tensor(state["torch_gen"], dtype=torch.uint8))
        self.env_steps = int(state["env_steps"])

    def close(self) -> None:
        self.envs.close()
