"""``model.policy``: the categorical MLP policy with Stable-Baselines3's policy interface.

An SB3 ``ActorCriticPolicy`` without the value head: ``predict`` (SB3's shapes and checks),
``device``, ``net_arch``, ``observation_space``, ``action_space``, ``set_training_mode``,
``obs_to_tensor``, ``get_distribution``, ``save``/``load`` (safetensors and JSON, no pickle), and the policy's
``state_dict``. Observations and actions go through a :class:`grpo_seq.sampling.spaces.SpaceCodec`.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from ..policies.mlp import CategoricalMLPPolicy
from ..errors import UsageError
from ..io.serialization import atomic_file
from ..sampling.spaces import SpaceCodec, space_from_json, space_to_json
from .distribution import ActionDistribution

__all__ = ["GRPOPolicy"]


_PER_DIMENSION = "per dimension"


class GRPOPolicy(CategoricalMLPPolicy):
    """``pi(a | o) = softmax(MLP(encode(o)))`` over the actions of ``action_space``: for a
    ``MultiDiscrete`` or ``MultiBinary`` one, one categorical per dimension (as SB3's PPO).

    Args:
        observation_space, action_space: the env's spaces (or their JSON, :func:`space_to_json`).
        action_nvec: left out, the action space's own dimensions (a factorised head); None, one
            categorical over the joint actions (what a file saved before factorised heads holds).
        action_bins, action_clip: a ``Box`` action's values per dimension, and the bounds that
            replace infinite ones (:class:`grpo_seq.sampling.spaces.SpaceCodec`).
        action_head, log_std_init: a ``Box`` action's head over those values: ``"categorical"``
            (the default) or ``"gaussian"``, a Gaussian per dimension starting at ``log_std_init``
            (SB3's name) (:mod:`grpo_seq.policies.mlp`).
        **kwargs: :class:`CategoricalMLPPolicy`'s arguments (``hidden_sizes``, ``activation``,
            ``obs_scale``, ``obs_shift``, ``orthogonal_init``).
    """

    def __init__(self, observation_space: spaces.Space | dict, action_space: spaces.Space | dict,
                 action_nvec: Any = _PER_DIMENSION, action_bins: int | None = None,
                 action_clip: Any = None, **kwargs: Any):
        obs_space = space_from_json(observation_space) if isinstance(observation_space, dict) else observation_space
        act_space = space_from_json(action_space) if isinstance(action_space, dict) else action_space
        clip = tuple(action_clip) if action_clip is not None else None
        codec = SpaceCodec(obs_space, act_space, "GRPO", action_bins, clip)
        kwargs.pop("obs_dim", None), kwargs.pop("num_actions", None)
        nvec = codec.action_nvec if isinstance(action_nvec, str) and action_nvec == _PER_DIMENSION else action_nvec
        for name, value in (("action_bins", action_bins), ("action_clip", action_clip)):
            if value is not None and codec.action_values is None:
                raise UsageError(f"GRPO(policy_kwargs=dict({name}=...)): cuts a continuous (Box) action into values; "
                                 f"this env's actions are {act_space}")
        if kwargs.get("action_head", "categorical") != "categorical" and codec.action_values is None:
            raise UsageError(f"GRPO(policy_kwargs=dict(action_head={kwargs['action_head']!r})): for a continuous (Box) "
                             f"action; this env's actions are {act_space}")
        if "log_std_init" in kwargs and kwargs.get("action_head") != "gaussian":
            raise UsageError("GRPO(policy_kwargs=dict(log_std_init=...)): the Gaussian head's; this policy's head is "
                             "categorical (add action_head='gaussian')")
        super().__init__(codec.obs_dim, codec.num_actions, action_nvec=nvec, **kwargs)
        self.observation_space, self.action_space, self.codec = obs_space, act_space, codec
        self.init_kwargs.update(observation_space=space_to_json(obs_space), action_space=space_to_json(act_space))
        if codec.action_values is not None:  # a continuous action: the values its tokens stand for
            self.init_kwargs.update(action_bins=codec.action_values.shape[1], action_clip=list(clip) if clip else None)

    @property
    def device(self) -> torch.device:
        """Where the weights are (SB3's ``policy.device``)."""
        return next(self.parameters()).device

    @property
    def net_arch(self) -> list[int]:
        """The hidden layer sizes (SB3's ``net_arch`` of the policy network)."""
        return list(self.init_kwargs["hidden_sizes"])

    def set_training_mode(self, mode: bool) -> None:
        self.train(mode)

    def obs_to_tensor(self, observation: Any) -> tuple[torch.Tensor, bool]:
        """``(encoded observations (n, obs_dim), vectorized)``, as SB3's ``obs_to_tensor``."""
        if isinstance(observation, tuple) and len(observation) == 2 and isinstance(observation[1], dict):
            raise ValueError("You have passed a tuple to the predict() function instead of a Numpy array or a Dict. "
                             "You are probably mixing Gym API with SB3 VecEnv API: `obs, info = env.reset()` "
                             "(Gym API) vs `obs = vec_env.reset()` (SB3 VecEnv API). See related issue "
                             "https://github.com/DLR-RM/stable-baselines3/issues/1694 and documentation for more "
                             "information: https://stable-baselines3.readthedocs.io/en/master/guide/vec_envs.html"
                             "#vecenv-api-vs-gym-api")
        obs = observation if isinstance(observation, dict) else np.asarray(observation)
        vectorized = self.codec.is_vectorized(obs)
        return torch.as_tensor(self.codec.encode_obs(self.codec.as_batch(obs)), device=self.device), vectorized

    def get_distribution(self, obs: torch.Tensor) -> ActionDistribution:
        """The action distribution at encoded observations ``obs`` (what :meth:`obs_to_tensor` gives),
        as SB3's ``get_distribution``: ``log_prob``, ``entropy``, ``sample``, ``mode`` over the env's
        actions (:mod:`grpo_seq.sb3.distribution`)."""
        return ActionDistribution(self.logits(obs), self.action_nvec, self.codec)

    def evaluate_actions(self, obs: torch.Tensor, actions: torch.Tensor) -> Any:
        raise UsageError("GRPOPolicy.evaluate_actions: GRPO has no value head (its baseline is the group's mean), so "
                         "there are no values to return; get_distribution(obs).log_prob(actions) and .entropy() give "
                         "the rest")

    def predict_values(self, obs: torch.Tensor) -> Any:
        raise UsageError("GRPOPolicy.predict_values: GRPO has no value head (its baseline is the group's mean)")

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, Any]:
        """``(actions, state)`` as SB3's ``BasePolicy.predict``: one observation gives one action
        (shaped as the action space), a batch ``(n, ...)`` gives ``n``; sampling draws from torch's
        global generator (seeded with the model's seed)."""
        obs, vectorized = self.obs_to_tensor(observation)
        with torch.no_grad():
            tokens = self.act(obs, greedy=deterministic).cpu().numpy()
        actions = self.codec.decode_actions(tokens)
        return (actions if vectorized else actions[0, ...]), state

    def save(self, path: str | os.PathLike) -> None:
        """The weights (safetensors) and the constructor's arguments (JSON) in one file, no pickle."""
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        header = json.dumps({"class": type(self).__name__, "kwargs": self.init_kwargs}).encode()
        with atomic_file(path) as tmp, open(tmp, "wb") as f:
            f.write(len(header).to_bytes(8, "little") + header + save_tensors(state))

    @classmethod
    def load(cls, path: str | os.PathLike, device: str | torch.device = "auto") -> "GRPOPolicy":
        """A policy :meth:`save` wrote."""
        with open(path, "rb") as f:
            data = f.read()
        size = int.from_bytes(data[:8], "little")
        meta = json.loads(data[8 : 8 + size])
        policy = cls(**{"action_nvec": None, **meta["kwargs"]})  # without it: a joint head (an older file)
        policy.load_state_dict(load_tensors(data[8 + size :]))
        return policy.to(sb3_device(device))


def sb3_device(device: str | torch.device) -> torch.device:
    """SB3's ``get_device``: ``"auto"`` is a GPU where torch sees one, else the CPU; ``"cuda"``
    without a GPU is the CPU."""
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    if device.type == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu")
    return device
