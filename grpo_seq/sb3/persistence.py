"""``GRPO``'s parameters and files as Stable-Baselines3 has them: ``get_parameters`` /
``set_parameters``, ``save`` (one zip, :mod:`grpo_seq.sb3.saving`) and ``load`` (``env``,
``custom_objects``, ``force_reset``, ``print_system_info``)."""

from __future__ import annotations

import platform
import warnings
from typing import Any

import numpy as np
import torch
from gymnasium import spaces as gym_spaces

from ..policies.mlp import CategoricalMLPPolicy
from . import arguments, saving
from .policy import GRPOPolicy
from ..sampling.spaces import space_to_json
from .schedule import schedule_from_json, schedule_to_json, tabulate

__all__ = ["Persistence", "DATA_KEYS"]

SCHEDULES = ("learning_rate", "clip_range")  # may be functions of progress (saved as tables of values)
# the model's attributes in the zip's ``data`` entry (Stable-Baselines3's names)
DATA_KEYS = ("policy_class", "policy_kwargs", "observation_space", "action_space", "n_envs", "num_timesteps",
             "seed", "verbose", "learning_rate", "lr_schedule", "gamma", "n_steps", "batch_size", "n_epochs",
             "clip_range", "ent_coef", "max_grad_norm", "_last_obs", "ep_info_buffer", "ep_success_buffer")


def _jsonable(name: str, value: Any) -> Any:
    """``value`` as JSON; what SB3 would pickle is named by type and refused (no pickle here)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        return value.tolist()
    if hasattr(value, "contains") and hasattr(value, "sample"):  # a gymnasium space
        return {":type:": str(type(value)), **space_to_json(value)}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "deque":
        return [_jsonable(name, v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(name, v) for k, v in value.items()}
    if callable(getattr(value, "to_json", None)) and value.to_json() is not None:  # a schedule
        return value.to_json()
    if schedule_to_json(value) is not None:  # SB3's own schedule classes
        return schedule_to_json(value)
    if callable(value) and name in SCHEDULES:  # a function of progress: its values, not its code
        return tabulate(value)
    if isinstance(value, type):
        return {":type:": str(type(value)), "name": value.__name__}
    return {":type:": str(type(value)), ":not_serialized:": f"{name} is code, not saved (no pickle here): pass it "
            f"again, GRPO.load(path, custom_objects={{'{name}': ...}})"}


def _policy_json(policy: torch.nn.Module) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``policy.json`` and the env's spaces: a :class:`GRPOPolicy` is saved as the
    :class:`CategoricalMLPPolicy` it is (which :func:`grpo_seq.load_policy` and the server read),
    its spaces beside it in ``grpo.json``."""
    kwargs = dict(getattr(policy, "init_kwargs", {}))
    if not isinstance(policy, GRPOPolicy):
        return {"class": type(policy).__name__, "kwargs": kwargs}, None
    # the spaces, and how a continuous action's tokens map to its values (its bins, its clip range)
    spaces = {k: kwargs.pop(k) for k in ("observation_space", "action_space", "action_bins", "action_clip") if k in kwargs}
    return {"class": CategoricalMLPPolicy.__name__, "kwargs": kwargs}, spaces


def _flat_spaces(policy: CategoricalMLPPolicy) -> dict[str, Any]:
    """The spaces of a file saved without them: a flat Box of observations, Discrete actions."""
    kw = policy.init_kwargs
    box = gym_spaces.Box(-np.inf, np.inf, (int(kw["obs_dim"]),), np.float32)
    return {"observation_space": space_to_json(box), "action_space": space_to_json(gym_spaces.Discrete(kw["num_actions"]))}


def _in_spaces(policy: CategoricalMLPPolicy, spaces: dict[str, Any], kwargs: dict[str, Any]) -> GRPOPolicy:
    kwargs = {"action_nvec": None, **kwargs}  # without it: a joint head (a file saved before factorised heads)
    out = GRPOPolicy(**spaces, **{k: v for k, v in kwargs.items() if k not in ("obs_dim", "num_actions")})
    out.load_state_dict(policy.state_dict())
    return out


class Persistence:
    """The parameter and file half of :class:`grpo_seq.sb3.GRPO`."""

    def get_parameters(self) -> dict[str, dict[str, torch.Tensor]]:
        """``{"policy": state_dict, "policy.optimizer": state_dict}`` (SB3's names)."""
        out = {"policy": self.policy.state_dict()}
        if self._trainer is not None:
            out["policy.optimizer"] = self._trainer.optimizer.state_dict()
        return out

    def set_parameters(self, load_path_or_dict: Any, exact_match: bool = True, device: str = "auto") -> None:
        """Load parameters from :meth:`get_parameters`'s dict or a saved zip. An unknown object name is
        a ValueError, and with ``exact_match`` so is a missing one (and a missing tensor, torch's
        RuntimeError), as in SB3."""
        params = load_path_or_dict
        if not isinstance(params, dict):
            params = {"policy": saving.read_model_zip(load_path_or_dict)[0]}
        objects = {"policy": self.policy}
        if self._trainer is not None:
            objects["policy.optimizer"] = self._trainer.optimizer
        updated = set()
        for name, state in params.items():
            if name not in objects:
                raise ValueError(f"Key {name} is an invalid object name.")
            if isinstance(objects[name], torch.nn.Module):
                objects[name].load_state_dict(state, strict=exact_match)
            else:
                objects[name].load_state_dict(state)
            updated.add(name)
        if exact_match and updated != set(objects):
            raise ValueError(f"Names of parameters do not match agents' parameters: expected {sorted(objects)}, "
                             f"got {sorted(updated)}")
        self._actors.clear()

    def _data(self, exclude: Any = None, include: Any = None) -> dict[str, Any]:
        """The ``data`` entry: :data:`DATA_KEYS` less ``exclude`` plus ``include``."""
        keys = (set(DATA_KEYS) - set(exclude or ())) | set(include or ())
        data = {k: _jsonable(k, getattr(self, k, None)) for k in DATA_KEYS + tuple(sorted(set(include or ())))
                if k in keys and k != "_last_obs"}
        if "_last_obs" in keys:  # as arrays beside it, not an image's worth of JSON numbers
            data["_last_obs"] = None if self._last_obs is None else {":type:": str(type(self._last_obs)),
                                                                     ":member:": saving.LAST_OBS}
        return data

    def save(self, path: Any, exclude: Any = None, include: Any = None) -> None:
        """One zip file (``.zip`` added without a suffix; or a file object), safetensors and JSON
        inside (:mod:`grpo_seq.sb3.saving`); ``exclude`` / ``include`` name attributes left out of
        (or added to) what is saved, as SB3's."""
        policy = getattr(self.policy, "_orig_mod", self.policy)  # torch.compile's wrapper: the module inside
        policy_json, spaces = _policy_json(policy)
        skip = set(exclude or ()) - set(include or ())
        meta = {"format": saving.FORMAT, "num_timesteps": self.num_timesteps, "seed": self.seed,
                "group_mode": self.group_mode, "horizon": self.horizon, "max_episode_steps": self._max_episode_steps,
                "policy_kwargs": {k: v for k, v in self.policy_kwargs.items() if k in ("net_arch", "obs_scale")},
                "config": {k: v for k, v in self.config.to_dict().items() if k in self._ours or k in
                           arguments.SURFACE_DEFAULTS or k in ("mu", "epsilon", "max_grad_norm", "num_minibatches", "minibatch_tokens")},
                "env_id": self._source.env.spec.id if self._source and self._source.env.spec else None,
                "attributes": {"verbose": self.verbose} if "verbose" not in skip else {},
                "last_obs": None if self._last_obs is None else {"member": saving.LAST_OBS,
                                                                  "parts": isinstance(self._last_obs, dict)},
                "spaces": spaces}
        saving.write_model_zip(path, policy, policy_json, meta, self._data(exclude, include), _obs_arrays(self._last_obs))

    @classmethod
    def load(cls, path: Any, env: Any = None, device: str = "auto", custom_objects: dict[str, Any] | None = None,
             print_system_info: bool = False, force_reset: bool = True, **kwargs: Any) -> Any:
        """A model saved by :meth:`save`; ``env`` to train on (None: predict only, until :meth:`set_env`).
        ``custom_objects`` replace saved attributes (``learning_rate``, ``clip_range``, ...,
        ``policy_class`` for a policy of your own class and ``features_extractor_class`` for an
        extractor the saving program defined); ``kwargs`` set what JSON cannot hold
        (``reward_function=``) or override saved options. ``force_reset=False`` keeps the env's
        last observation (SB3's ``_last_obs``)."""
        custom = dict(custom_objects or {})
        tensors, policy_json, meta = saving.read_model_zip(path)  # damaged or another format: SavedModelError
        data = saving.read_data(path)
        for key, item in data.items():
            if isinstance(item, dict) and ":not_serialized:" in item and key not in custom:
                warnings.warn(f"Could not deserialize object {key} (code is not saved: no pickle here). Consider "
                              "using `custom_objects` argument to replace this object.", UserWarning, stacklevel=2)
        if print_system_info:
            print(f"== CURRENT SYSTEM INFO ==\nOS: {platform.platform()}\nPython: {platform.python_version()}\n"
                  f"PyTorch: {torch.__version__}\nNumpy: {np.__version__}")
        extractor = custom.pop("features_extractor_class", None)
        if extractor is not None and "extractor" in policy_json["kwargs"]:  # a class the saving program defined
            policy_json["kwargs"]["extractor"]["class"] = extractor
        policy = saving.build_policy(saving.zip_path(path, must_exist=True), tensors, policy_json,
                                     custom.pop("policy_class", None))
        if type(policy) is CategoricalMLPPolicy:  # the network, seen in the env's spaces
            policy = _in_spaces(policy, meta.get("spaces") or _flat_spaces(policy), policy_json["kwargs"])
        attributes = meta.get("attributes", {})
        options = {**meta["config"], "group_mode": meta["group_mode"], "horizon": meta["horizon"],
                   "max_episode_steps": meta["max_episode_steps"], "seed": meta["seed"],
                   **attributes, **kwargs}
        for key in SCHEDULES:  # a schedule saved as data is made again
            if isinstance(data.get(key), dict) and {":table:", "constant"} & set(data[key]) and key not in custom:
                options[key] = schedule_from_json(data[key])
        for key in ("learning_rate", "clip_range", "gamma", "ent_coef", "max_grad_norm", "verbose"):
            if key in custom:
                options[key] = custom.pop(key)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the saved options were warned about when first given
            model = cls("MlpPolicy", env, device=device, _policy=policy, **options)
        model.num_timesteps = int(meta["num_timesteps"])
        if "lr_schedule" in custom:
            model.lr_schedule = custom.pop("lr_schedule")
        if not force_reset and env is not None and meta.get("last_obs") is not None:
            model._last_obs = _saved_last_obs(path, meta["last_obs"])
        return model


def _obs_arrays(obs: Any) -> dict[str, np.ndarray] | None:
    """An observation (an array, or a Dict observation's parts) as named arrays."""
    if obs is None:
        return None
    return {str(k): np.asarray(v) for k, v in obs.items()} if isinstance(obs, dict) else {"obs": np.asarray(obs)}


def _saved_last_obs(path: Any, saved: Any) -> Any:
    """The last observation :meth:`Persistence.save` recorded: in ``last_obs.safetensors``, or (a file
    of format 1) as JSON in ``grpo.json``."""
    if not (isinstance(saved, dict) and "member" in saved):
        return np.asarray(saved)
    arrays = saving.read_last_obs(path)
    return arrays if saved.get("parts") else arrays["obs"]
