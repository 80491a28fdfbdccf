"""The spaces Stable-Baselines3's PPO takes, as the flat observations and token actions of a
categorical MLP policy: the env job sees every env through it (``sampling.env.as_tokens``), and the
SB3 door the user's own.

Observations: a ``Box`` of any shape is flattened; ``Discrete(n)`` is one-hot encoded (as SB3
does), ``MultiDiscrete`` one one-hot per dimension, ``MultiBinary`` as 0/1 floats. Actions:
``Discrete(n)`` are the tokens; a one-dimensional ``MultiDiscrete(nvec)`` or ``MultiBinary(n)``
action is one token ``k`` among its joint actions (``prod(nvec)`` or ``2**n``, at most
:data:`MAX_JOINT_ACTIONS`), read as the mixed-radix digits of ``k`` (:attr:`SpaceCodec.action_nvec`),
which the policy scores with one categorical per dimension, as SB3's PPO
(:class:`grpo_seq.policies.mlp.CategoricalMLPPolicy`'s ``action_nvec``).

A continuous (``Box``) action becomes tokens the way robot-action models make them (RT-1, RT-2,
Gato): each dimension is cut into ``action_bins`` evenly spaced values from its low to its high
bound, ``v_i(b) = low_i + (high_i - low_i) b / (K - 1)``, and the action is the same joint token
over ``MultiDiscrete([K] * dims)``: one categorical per dimension, so its log-prob, entropy, ratio
and KL are per decision as for ``MultiDiscrete`` (Tang & Agrawal, AAAI 2020, found such
per-dimension categoricals on par with or ahead of Gaussian policies on-policy). The bounds are the
space's; an unbounded dimension needs ``action_clip`` (a low and a high) and is refused without
it. A composite (``Dict``, ``Tuple``) action space is refused by name.

A ``Dict`` observation (Stable-Baselines3's ``MultiInputPolicy``) is each of its parts encoded as
above, concatenated in the space's key order, as SB3's ``CombinedExtractor`` flattens them (an
image part flattened too: the policy's ``obs_parts`` give it back its shape).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..errors import UsageError

__all__ = ["SpaceCodec", "dict_parts", "CodecWrapper", "space_to_json", "space_from_json", "MAX_JOINT_ACTIONS", "ACTION_BINS",
           "box_action_values"]

MAX_JOINT_ACTIONS = 2**62  # a joint action is one int64 token
# Values per dimension of a continuous action where nobody chose: odd, so a symmetric range has 0 as
# a value (Tang & Agrawal's K = 11 on MuJoCo).
ACTION_BINS = 11
# Joint actions up to this many are decoded by a lookup in a table of every one of them: an env
# stepped one action at a time (a group's episodes, an evaluation) spent longer decoding the
# token's digits than Pendulum spends on its own step (benchmarks/env_step_cost.py).
ACTION_TABLE_MAX = 4096


def box_action_values(space: spaces.Box, bins: int, clip: tuple[float, float] | None = None,
                      name: str = "env") -> np.ndarray:
    """``(dims, bins)``: the values each dimension of a ``Box`` action takes,
    ``low_i + (high_i - low_i) b / (bins - 1)``; infinite bounds are replaced by ``clip``
    (refused without it, naming the space)."""
    if bins < 2:
        raise UsageError(f"{name}: action_bins must be >= 2 (a dimension needs 2 values to choose between), got {bins}")
    low, high = space.low.astype(np.float64).ravel(), space.high.astype(np.float64).ravel()
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        if clip is None:
            raise UsageError(f"{name}: the action space {space} is unbounded; give a clip range for its values "
                             "(action_clip, e.g. [-1, 1]) to cut it into bins")
        low = np.where(np.isfinite(low), low, clip[0])
        high = np.where(np.isfinite(high), high, clip[1])
    return low[:, None] + (high - low)[:, None] * np.linspace(0.0, 1.0, bins)[None, :]


def _radices(space: spaces.Space) -> list[int]:
    if isinstance(space, spaces.MultiDiscrete):
        return [int(n) for n in np.asarray(space.nvec).ravel()]
    return [2] * int(np.prod(space.shape))


class SpaceCodec:
    """Observations of ``obs_space`` as flat float32 vectors (:meth:`encode_obs`) and token ``k``
    as an action of ``act_space`` (:meth:`decode_actions`); :attr:`action_nvec`: the sizes of a
    multi-dimensional action's dimensions (None for ``Discrete``)."""

    def __init__(self, obs_space: spaces.Space, act_space: spaces.Space, name: str = "env",
                 action_bins: int | None = None, action_clip: tuple[float, float] | None = None):
        self.obs_space, self.act_space = obs_space, act_space
        self.obs_dim = self._obs_dim(obs_space, name)
        self.action_values = None  # a Box action's (dims, bins) values
        if isinstance(act_space, spaces.Box):
            self.action_values = box_action_values(act_space, action_bins or ACTION_BINS, action_clip, name)
        self.num_actions = self._num_actions(act_space, name, self.action_values)
        self.action_nvec = None if isinstance(act_space, spaces.Discrete) else self._nvec()
        self.identity = (isinstance(obs_space, spaces.Box) and len(obs_space.shape) == 1
                         and isinstance(act_space, spaces.Discrete) and int(act_space.start) == 0)
        self._table = None  # every joint action, decoded (a small action space's lookup)
        if self.num_actions <= ACTION_TABLE_MAX:
            self._table = self._decode_digits(np.arange(self.num_actions))

    @staticmethod
    def obs_size(space: spaces.Space, name: str) -> int:
        """The length of ``space``'s observations as flat vectors (:meth:`encode_obs`)."""
        return SpaceCodec._obs_dim(space, name)

    @staticmethod
    def _obs_dim(space: spaces.Space, name: str) -> int:
        if isinstance(space, spaces.Dict):
            return sum(SpaceCodec._obs_dim(part, f"{name}[{key!r}]") for key, part in space.spaces.items())
        if isinstance(space, spaces.Box):
            return int(np.prod(space.shape))
        if isinstance(space, spaces.Discrete):
            return int(space.n)
        if isinstance(space, spaces.MultiDiscrete):
            return int(np.sum(space.nvec))
        if isinstance(space, spaces.MultiBinary):
            return int(np.prod(space.shape))
        raise UsageError(f"{name}: observations must be a Box, Discrete, MultiDiscrete, MultiBinary or a Dict of "
                         f"them, got {space}")

    def _nvec(self) -> list[int]:
        if self.action_values is not None:
            return [self.action_values.shape[1]] * self.action_values.shape[0]
        return _radices(self.act_space)

    @staticmethod
    def _num_actions(space: spaces.Space, name: str, values: np.ndarray | None) -> int:
        if isinstance(space, spaces.Discrete):
            return int(space.n)
        if values is not None:
            n = values.shape[1] ** values.shape[0]
            if n > MAX_JOINT_ACTIONS:
                raise UsageError(f"{name}: the action space {space} cut into {values.shape[1]} values per dimension "
                                 f"has {n} joint actions, more than the {MAX_JOINT_ACTIONS} one int64 token numbers; "
                                 "give fewer action_bins")
            return n
        if isinstance(space, spaces.MultiBinary) and len(space.shape) != 1:
            # Stable-Baselines3's own check and message
            raise AssertionError(f"Multi-dimensional MultiBinary({space.n}) action space is not supported. "
                                 "You can flatten it instead.")
        if isinstance(space, (spaces.MultiDiscrete, spaces.MultiBinary)) and len(space.shape) == 1:
            n = math.prod(_radices(space))
            if n > MAX_JOINT_ACTIONS:
                raise UsageError(f"{name}: the action space {space} has {n} joint actions, more than the "
                                 f"{MAX_JOINT_ACTIONS} one int64 token numbers")
            return n
        raise UsageError(f"{name}: actions must be Discrete, MultiDiscrete, MultiBinary or a Box to be tokens, got "
                         f"{space} (a composite action space); flatten it with a wrapper")

    def encode_obs(self, obs: Any) -> np.ndarray:
        """A batch ``(n, *obs_space.shape)`` (``(n,)`` for Discrete; a dict of such batches for a
        Dict space) as ``(n, obs_dim)`` float32."""
        return _encode(self.obs_space, obs)

    def decode_obs(self, flat: np.ndarray) -> Any:
        """Encoded observations ``(n, obs_dim)`` back in the space's own form (what a VecEnv returns)."""
        return _decode(self.obs_space, np.asarray(flat))

    def is_vectorized(self, obs: Any) -> bool:
        """Stable-Baselines3's rule: one observation of the space's shape, or a batch of them (for a
        Dict space, judged by its first part)."""
        space = self.obs_space
        if isinstance(space, spaces.Dict):
            key = next(iter(space.spaces))
            return SpaceCodec(space.spaces[key], spaces.Discrete(2)).is_vectorized(np.asarray(obs[key]))
        shape = space.shape
        if obs.shape == shape:
            return False
        if obs.shape[1:] == shape or (isinstance(space, spaces.Discrete) and obs.shape[1:] in ((), (1,))):
            return True
        raise ValueError(f"Error: Unexpected observation shape {obs.shape} for {type(space).__name__} "
                         f"environment, please use {shape} or (n_env, {', '.join(map(str, shape))}) for the "
                         "observation shape.")

    def batch_of_one(self, obs: Any) -> Any:
        """One observation as a batch of one (each part of a Dict one)."""
        if isinstance(self.obs_space, spaces.Dict):
            return {key: np.asarray(obs[key])[None] for key in self.obs_space.spaces}
        return np.asarray(obs)[None]

    def as_batch(self, obs: Any) -> Any:
        """Observations (one, or a batch) as a batch ``(n, *shape)`` of the space's form."""
        space = self.obs_space
        if isinstance(space, spaces.Dict):
            return {key: np.asarray(obs[key]).reshape((-1, *part.shape)) for key, part in space.spaces.items()}
        return np.asarray(obs).reshape((-1, *space.shape))

    def decode_actions(self, tokens: np.ndarray) -> np.ndarray:
        """Tokens ``(n,)`` as actions ``(n, *act_space.shape)`` of the action space's dtype (a new array)."""
        if self._table is not None:
            return self._table[np.asarray(tokens, dtype=np.int64)]
        return self._decode_digits(tokens)

    def decode_one(self, token: Any) -> Any:
        """One token as one action of the action space (what ``decode_actions`` gives for it)."""
        if self._table is not None:
            return self._table[int(token)].copy()
        if self.action_values is not None:  # a Box's: its digits by Python arithmetic, one lookup
            rest, digits = int(token), []
            for n in reversed(self.action_nvec):
                rest, d = divmod(rest, n)
                digits.append(d)
            values = self.action_values[np.arange(len(digits)), digits[::-1]]
            return values.reshape(self.act_space.shape).astype(self.act_space.dtype)
        return self._decode_digits(np.asarray([token]))[0]

    def encode_actions(self, actions: Any) -> np.ndarray:
        """Actions ``(n, *act_space.shape)`` as their tokens ``(n,)`` (the inverse of
        :meth:`decode_actions`); a ``Box`` action's values as the nearest of each dimension's values."""
        space = self.act_space
        if isinstance(space, spaces.Discrete):
            return np.asarray(actions, dtype=np.int64).reshape(-1) - int(space.start)
        flat = np.asarray(actions).reshape(-1, len(self.action_nvec))
        if self.action_values is not None:
            flat = np.abs(flat[:, :, None] - self.action_values[None]).argmin(axis=2)
        digits = flat.astype(np.int64)
        token = digits[:, 0]
        for i, n in enumerate(self.action_nvec[1:], start=1):
            token = token * n + digits[:, i]
        return token

    def _decode_digits(self, tokens: np.ndarray) -> np.ndarray:
        """:meth:`decode_actions` by arithmetic: a token's mixed-radix digits, a Box's bin values."""
        space, tokens = self.act_space, np.asarray(tokens, dtype=np.int64)
        if isinstance(space, spaces.Discrete):
            return (tokens + int(space.start)).astype(space.dtype)
        digits, rest = [], tokens.copy()
        for n in reversed(self.action_nvec):
            digits.append(rest % n)
            rest //= n
        digits = np.stack(digits[::-1], axis=1)
        if self.action_values is not None:  # each dimension's bin as its value
            values = np.take_along_axis(self.action_values[None], digits[..., None], axis=2)[..., 0]
            return values.reshape((len(tokens), *space.shape)).astype(space.dtype)
        return digits.astype(space.dtype)


def _encode(space: spaces.Space, obs: Any) -> np.ndarray:
    """A batch of ``space``'s observations as ``(n, dim)`` float32 (one-hot for discrete parts)."""
    if isinstance(space, spaces.Dict):
        return np.concatenate([_encode(part, obs[key]) for key, part in space.spaces.items()], axis=1)
    obs = np.asarray(obs)
    if isinstance(space, spaces.Discrete):
        return np.eye(int(space.n), dtype=np.float32)[obs.reshape(-1).astype(np.int64) - int(space.start)]
    if isinstance(space, spaces.MultiDiscrete):
        flat = obs.reshape(len(obs), -1).astype(np.int64)
        return np.concatenate([np.eye(n, dtype=np.float32)[flat[:, i]] for i, n in enumerate(_radices(space))], 1)
    return obs.reshape(len(obs), -1).astype(np.float32)


def _decode(space: spaces.Space, flat: np.ndarray) -> Any:
    """What :func:`_encode` made, back in ``space``'s own form."""
    if isinstance(space, spaces.Dict):
        cuts = np.cumsum([SpaceCodec._obs_dim(part, key) for key, part in space.spaces.items()])[:-1]
        return {key: _decode(part, chunk) for (key, part), chunk in zip(space.spaces.items(), np.split(flat, cuts, 1))}
    if isinstance(space, spaces.Discrete):
        return (flat.argmax(1) + int(space.start)).astype(space.dtype)
    if isinstance(space, spaces.MultiDiscrete):
        cuts = np.cumsum(_radices(space))[:-1]
        return np.stack([p.argmax(1) for p in np.split(flat, cuts, axis=1)], 1).astype(space.dtype)
    return flat.reshape((len(flat), *space.shape)).astype(space.dtype)


class CodecWrapper(gym.Wrapper):
    """An env copy seen through a :class:`SpaceCodec`: flat float observations, token actions.
    Records ``info["is_success"]`` at the end of each episode in :attr:`successes`."""

    def __init__(self, env: gym.Env, codec: SpaceCodec):
        super().__init__(env)
        self.codec, self.successes = codec, []
        self.observation_space = spaces.Box(-np.inf, np.inf, (codec.obs_dim,), np.float32)
        self.action_space = spaces.Discrete(codec.num_actions)
        self._box_obs = isinstance(codec.obs_space, spaces.Box)  # flattened as it is, one copy

    def _encode(self, obs: Any) -> np.ndarray:
        if self._box_obs:
            return np.array(obs, dtype=np.float32).reshape(-1)
        return self.codec.encode_obs(self.codec.batch_of_one(obs))[0]

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict]:
        obs, info = self.env.reset(**kwargs)
        return self._encode(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(self.codec.decode_one(action))
        if (terminated or truncated) and "is_success" in info:
            self.successes.append(bool(info["is_success"]))
        return self._encode(obs), reward, terminated, truncated, info


def space_to_json(space: spaces.Space) -> dict[str, Any]:
    """A Box, Discrete, MultiDiscrete, MultiBinary or Dict space as JSON (what a saved policy records)."""
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": [[key, space_to_json(part)] for key, part in space.spaces.items()]}
    if isinstance(space, spaces.Box):
        low, high = space.low, space.high
        if low.size and (low == low.flat[0]).all() and (high == high.flat[0]).all():
            # one bound for every element (an image's 0 and 255): two numbers and the shape, not a
            # list as long as the image (an Atari frame stack's would be megabytes of JSON)
            return {"type": "Box", "low": low.flat[0].item(), "high": high.flat[0].item(), "shape": list(space.shape),
                    "dtype": str(space.dtype)}
        return {"type": "Box", "low": low.tolist(), "high": high.tolist(), "dtype": str(space.dtype)}
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec).tolist()}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    raise UsageError(f"cannot save the space {space}: Box, Discrete, MultiDiscrete or MultiBinary")


def space_from_json(data: dict[str, Any]) -> spaces.Space:
    """The space :func:`space_to_json` wrote."""
    kind = data.get("type")
    if kind == "Dict":
        return spaces.Dict({key: space_from_json(part) for key, part in data["spaces"]})
    if kind == "Box":
        dtype = np.dtype(data["dtype"])
        if "shape" in data:  # one bound for every element
            return spaces.Box(data["low"], data["high"], tuple(data["shape"]), dtype=dtype)
        return spaces.Box(np.asarray(data["low"], dtype=dtype), np.asarray(data["high"], dtype=dtype), dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(data["n"], start=data.get("start", 0))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(data["nvec"])
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    raise ValueError(f"unknown space {kind!r}")


def dict_parts(space: spaces.Space, normalized_image: bool = False, normalize_images: bool = True) -> list[dict] | None:
    """A Dict observation's parts in key order, flat as :meth:`SpaceCodec.encode_obs` lays them out,
    for a policy to give its images back their shape (``CategoricalMLPPolicy(obs_parts=...)``): each
    ``{"size": n}``, an image part (as SB3's ``CombinedExtractor`` tells one: a uint8 Box of 3
    dimensions, or any Box of 3 with ``normalized_image``) also ``image_shape`` and ``scale`` (255
    for uint8 pixels unless ``normalize_images`` is off). None: not a Dict, or a Dict without images."""
    if not isinstance(space, spaces.Dict):
        return None
    parts = []
    for key, part in space.spaces.items():
        entry: dict[str, Any] = {"size": SpaceCodec.obs_size(part, key)}
        if isinstance(part, spaces.Box) and len(part.shape) == 3 and (part.dtype == np.uint8 or normalized_image):
            divide = part.dtype == np.uint8 and not normalized_image and normalize_images
            entry.update(image_shape=[int(d) for d in part.shape], scale=255.0 if divide else 1.0)
        parts.append(entry)
    return parts if any("image_shape" in p for p in parts) else None
