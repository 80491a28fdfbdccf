"""Stable-Baselines3's constructor arguments translated onto an env job spec
(:class:`grpo_seq.jobs.env_spec.EnvJob`).

The table of what maps where is :class:`grpo_seq.GRPO`'s docstring (and docs/guides/sb3.md).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable

from torch import nn

from ..loop.config import LoopConfig, token_minibatch_conflict
from ..envs.defaults import IMAGES, UNREGISTERED, per_env
from ..errors import UsageError
from ..jobs.env_spec import EnvJob

__all__ = ["PPO_ONLY", "SURFACE_DEFAULTS", "build_config", "policy_options", "split_schedule"]

# PPO arguments without a meaning in a critic-free method, at PPO's defaults: accepted silently
# there, named in one warning otherwise (gSDE, for continuous actions only, is refused).
PPO_ONLY = {"gae_lambda": 0.95, "vf_coef": 0.5, "clip_range_vf": None, "normalize_advantage": True, "use_sde": False,
            "sde_sample_freq": -1, "rollout_buffer_class": None, "rollout_buffer_kwargs": None,
            "_init_setup_model": True}
# Spec fields that the surface sets itself, from its own arguments (the env, the policy's
# policy_kwargs, learn's budget, device, max_episode_steps, exploration_bonus), or that belong to
# the command line's run folders.
_NOT_PASSED = ("seed", "resume_from", "overwrite", "report_to", "output_dir", "save_steps", "save_total_limit",
               "max_nonfinite_steps", "env_id", "total_env_steps", "record", "keep_best", "use_cpu", "torch_threads",
               "hidden_sizes", "obs_scale", "orthogonal_init", "max_episode_steps", "exploration_bonus",
               "group_mode", "horizon", "every_action")


# PPO's batch_size default, taken where the caller shapes PPO's rollout with n_steps
PPO_BATCH_SIZE = 64


def _surface_defaults() -> dict[str, Any]:
    """The env job's algorithm defaults (its spec's field defaults, then :data:`grpo_seq.envs.defaults.UNREGISTERED`'s
    values) that are LoopConfig fields, for an env without a registered id: what a saved model
    records of its options."""
    fields = {f.name: f.default for f in dataclasses.fields(EnvJob)}
    own = {k: fields[k] for k in ("lr_schedule", "adam_beta1", "beta", "loss_type")}
    grpo = {f.name for f in dataclasses.fields(LoopConfig)}
    return {**own, **{k: v for k, v in UNREGISTERED.items() if k in grpo}}


SURFACE_DEFAULTS: dict[str, Any] = _surface_defaults()
# the spec's own algorithm defaults, which no env family changes
SURFACE_OWN = {k: SURFACE_DEFAULTS[k] for k in ("lr_schedule", "adam_beta1", "beta", "loss_type")}
_ACTIVATIONS = {nn.Tanh: "tanh", nn.ReLU: "relu"}
CARTPOLE_IDS = ("CartPole-v0", "CartPole-v1")

Schedule = Callable[[float], float]


def split_schedule(name: str, value: float | Schedule) -> tuple[float, Schedule | None]:
    """A float, or an SB3 schedule ``f(progress_remaining) -> value`` (its value at the start, and itself)."""
    if callable(value):
        start = float(value(1.0))
        return start, value
    try:
        return float(value), None
    except (TypeError, ValueError):
        raise UsageError(f"GRPO({name}=...): a number or a schedule f(progress_remaining), got {value!r}") from None


def step_schedule(name: str, value: float | Schedule | None) -> Schedule | None:
    """What the door sets ``name`` from before each step: a schedule, or a constant 0 (SB3 takes a rate
    or a clip range of 0, which the spec does not: rl-zoo3 loads a model to act with both at 0);
    None: the spec's own value."""
    if value is None:
        return None
    start, schedule = split_schedule(name, value)
    return schedule if schedule is not None else (_zero if start == 0 else None)


def _zero(progress_remaining: float) -> float:
    """A constant 0, as SB3's ``constant_fn(0.0)`` makes one."""
    return 0.0


def _minibatches(outputs: int, wanted: int) -> int:
    """The largest divisor of ``outputs`` not above ``wanted`` (minibatches hold whole outputs)."""
    return max(d for d in range(1, outputs + 1) if outputs % d == 0 and d <= max(1, wanted))


def build_config(sb3: dict[str, Any], ours: dict[str, Any], n_envs: int, max_episode_steps: int,
                 steps_per_group: int | None, env_id: str | None = None, surface: dict[str, Any] | None = None,
                 images: bool = False) -> EnvJob:
    """The env job spec for SB3 arguments ``sb3`` (None where not given) and spec fields ``ours``:
    the env family's defaults of a registered ``env_id`` (CartPole's for an env without one), and
    no evaluation during training unless ``ours`` asks for it (``eval_every``).

    ``steps_per_group``: env steps one group costs when known (alternatives), else None (episodes:
    up to ``G x max_episode_steps``). ``surface``: the spec fields the surface sets from its own
    arguments (``seed``, ``max_episode_steps``, ``exploration_bonus``).
    """
    fields = {f.name for f in dataclasses.fields(EnvJob)} - set(_NOT_PASSED)
    unknown = sorted(set(ours) - fields)
    if unknown:
        raise UsageError(f"GRPO got unknown arguments: {', '.join(unknown)} (neither Stable-Baselines3 PPO's nor "
                         "the env job spec's; see the argument table in docs/guides/sb3.md)")
    if ours.get("eval_every") and env_id is None:
        raise UsageError("GRPO(eval_every=...): evaluation during learn needs an env with a registered id")
    # obs_norm off: PPO's policy sees the env's observations as they come (through the user's VecNormalize)
    kw = {**(per_env(env_id) if env_id else UNREGISTERED), **(IMAGES if images else {}), **SURFACE_OWN, "eval_every": 0,
          "obs_norm": False, **ours, **(surface or {})}
    # left to the spec, whose env default yields to a loss over whole episodes; images' own where they fit
    if "minibatch_tokens" not in ours and not (images and _token_loss(kw) and kw.get("num_minibatches", 1) == 1):
        kw.pop("minibatch_tokens", None)
    if "env_wrappers" not in ours:  # SB3 trains the env it is given as it is (the user wraps it: make_atari_env)
        kw["env_wrappers"] = []
    for sb3_name, name in (("n_epochs", "mu"), ("gamma", "gamma"), ("max_grad_norm", "max_grad_norm"),
                           ("group_size", "num_generations"), ("ent_coef", "ent_coef")):
        if sb3.get(sb3_name) is not None:
            kw[name] = sb3[sb3_name]
    if sb3.get("learning_rate") is not None:
        start, schedule = split_schedule("learning_rate", sb3["learning_rate"])
        if start != 0:  # 0: set before each step (step_schedule), as the spec takes no rate of 0
            kw["learning_rate"] = start
        # a schedule: the surface sets the rate from it before each step; a float: SB3's fixed rate
        # (the env program's linear decay stays the default when no rate is given)
        if schedule is not None or "lr_schedule" not in ours:
            kw["lr_schedule"] = "constant"
    clip = split_schedule("clip_range", sb3["clip_range"])[0] if sb3.get("clip_range") is not None else 0
    if clip != 0:  # 0: set before each step (step_schedule), as the spec takes no clip of 0
        kw["epsilon"] = clip
    G = int(kw["num_generations"])
    rollout = sb3["n_steps"] * n_envs if sb3.get("n_steps") is not None else None
    g_given = sb3.get("group_size") is not None or "num_generations" in ours
    if rollout is not None and steps_per_group is None and not g_given:
        # SB3's rollout holds whole episodes of each env: the family's G shrinks to the episodes
        # one rollout of n_steps holds, so that episodes end inside it as they would under PPO
        kw["num_generations"] = G = max(2, min(G, rollout // max_episode_steps))
    per_group = steps_per_group or G * max_episode_steps
    if rollout is not None and "num_groups" not in ours:
        kw["num_groups"] = max(1, round(rollout / per_group))
    batch_size = effective_batch_size(sb3)
    if batch_size is not None and not {"num_minibatches", "minibatch_tokens"} & set(ours):
        if _token_loss(kw):  # PPO's minibatches exactly: batch_size env steps drawn from the whole rollout
            kw["minibatch_tokens"] = int(batch_size)
        else:  # a loss over whole episodes: as many minibatches of whole episodes as fit
            outputs = int(kw["num_groups"]) * G
            steps = rollout or int(kw["num_groups"]) * per_group
            kw["num_minibatches"] = _minibatches(outputs, round(steps / batch_size))
    return EnvJob(env_id=env_id or "", **kw)


def effective_batch_size(sb3: dict[str, Any]) -> int | None:
    """``batch_size`` as given; not given, PPO's 64 where ``n_steps`` shapes PPO's rollout (minibatches
    carved from it, as PPO's), else None (the env program's own update)."""
    if sb3.get("batch_size") is not None:
        return int(sb3["batch_size"])
    return PPO_BATCH_SIZE if sb3.get("n_steps") is not None else None


def _token_loss(kw: dict[str, Any]) -> bool:
    """Whether the spec's loss is a mean of per-step terms, which minibatches of env steps may cut."""
    spec = {f.name: f.default for f in dataclasses.fields(EnvJob)} | kw
    return token_minibatch_conflict(spec["loss_type"], spec["importance_sampling_level"],
                                    spec["off_policy_mask_threshold"]) is None


def warn_ignored(sb3: dict[str, Any], ppo_only: dict[str, Any]) -> None:
    """One warning naming every PPO-only argument given away from PPO's default; gSDE and a
    negative ``clip_range_vf`` refused (the latter with SB3's own check)."""
    if ppo_only.get("use_sde"):
        raise UsageError("GRPO(use_sde=True): generalized State-Dependent Exploration (gSDE) is for continuous "
                         "actions, and actions here are tokens")
    vf = ppo_only.get("clip_range_vf")
    if isinstance(vf, (int, float)) and not callable(vf):
        assert vf > 0, "`clip_range_vf` must be positive, pass `None` to deactivate vf clipping"
    names = sorted(k for k, v in ppo_only.items() if not _is_default(v, PPO_ONLY[k]))
    if names:
        warnings.warn(f"GRPO ignores these PPO arguments (no critic or value function here): {', '.join(names)}",
                      UserWarning, stacklevel=3)


def _is_default(value: Any, default: Any) -> bool:
    try:
        return bool(value is default or value == default)
    except Exception:  # an object without a plain == (an array): not the default
        return False


def check_net_arch(policy_kwargs: dict[str, Any]) -> dict[str, Any]:
    """SB3's ``net_arch`` rules: ``None`` is the default (64, 64); the old list-of-dict form
    ``[dict(pi=..., vf=...)]`` is read as its dict, with SB3's deprecation warning."""
    arch = policy_kwargs.get("net_arch")
    if "net_arch" in policy_kwargs and arch is None:
        return {"net_arch": [64, 64]}
    if isinstance(arch, list) and arch and isinstance(arch[0], dict):
        warnings.warn("As shared layers in the mlp_extractor are removed since SB3 v1.8.0, you should now pass "
                      "directly a dictionary and not a list (net_arch=dict(pi=..., vf=...) instead of "
                      "net_arch=[dict(pi=..., vf=...)])", UserWarning, stacklevel=3)
        return {"net_arch": arch[0]}
    return {}


def optimizer_choice(policy_kwargs: dict[str, Any]) -> tuple[type, dict[str, Any]] | None:
    """SB3's ``optimizer_class`` / ``optimizer_kwargs`` in ``policy_kwargs`` (None: our AdamW)."""
    cls = policy_kwargs.get("optimizer_class")
    kwargs = dict(policy_kwargs.get("optimizer_kwargs") or {})
    if cls is None and not kwargs:
        return None
    if cls is None:
        import torch

        cls = torch.optim.Adam  # SB3's default optimizer class
    return cls, kwargs


def policy_options(policy_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """SB3's ``policy_kwargs`` as :class:`CategoricalMLPPolicy` arguments (plus ``obs_scale`` if given)."""
    kw = dict(policy_kwargs or {})
    kw.pop("optimizer_class", None), kw.pop("optimizer_kwargs", None)  # the optimizer's, not the network's
    out: dict[str, Any] = {}
    arch = kw.pop("net_arch", None)
    if isinstance(arch, dict):  # SB3 2.x: dict(pi=[...], vf=[...]); there is no value network here
        arch = arch.get("pi", [])
    if arch is not None:
        out["hidden_sizes"] = tuple(int(h) for h in arch)
    act = kw.pop("activation_fn", None)
    if act is not None:
        if act not in _ACTIVATIONS:
            raise UsageError(f"GRPO(policy_kwargs=dict(activation_fn={act!r})): supported are torch.nn.Tanh and "
                             "torch.nn.ReLU")
        out["activation"] = _ACTIVATIONS[act]
    if "ortho_init" in kw:
        out["orthogonal_init"] = bool(kw.pop("ortho_init"))
    kw.pop("share_features_extractor", None)  # no value network here to share the torso with, or not
    custom = kw.pop("features_extractor_class", None)
    if custom is not None and not isinstance(custom, type):
        raise UsageError(f"GRPO(policy_kwargs=dict(features_extractor_class=...)): a class, as SB3 takes (a "
                         f"BaseFeaturesExtractor subclass), got {custom!r}")
    if custom is not None:  # the user's own torso, its arguments all its own (grpo_seq.policies.extractor)
        out["extractor"] = {"class": custom,  # saved by its import path (no pickle)
                            "kwargs": dict(kw.pop("features_extractor_kwargs", None) or {}),
                            "normalize_images": bool(kw.pop("normalize_images", True))}
    out.update(_features_options(kw.pop("features_extractor_kwargs", None), kw.pop("normalize_images", None)))
    for key in ("obs_scale", "orthogonal_init", "action_head", "log_std_init", *ACTION_FORM):
        if key in kw:
            out[key] = kw.pop(key)
    if kw:
        raise UsageError(f"GRPO(policy_kwargs=...): not supported here: {', '.join(sorted(kw))} (supported: "
                         "net_arch, activation_fn, ortho_init, optimizer_class, optimizer_kwargs, "
                         "share_features_extractor, features_extractor_class, features_extractor_kwargs, "
                         "normalize_images, obs_scale, "
                         "action_bins, action_clip, action_head, log_std_init)")
    return out


def _features_options(extractor_kwargs: dict[str, Any] | None, normalize_images: Any) -> dict[str, Any]:
    """SB3's image torso options: ``features_extractor_kwargs=dict(features_dim=N)`` (the Nature
    CNN's output width) and ``normalize_images=False`` (pixels as they are, not divided by 255)."""
    fx = dict(extractor_kwargs or {})
    out: dict[str, Any] = {}
    if "features_dim" in fx:  # CnnPolicy's
        out["image_features"] = int(fx.pop("features_dim"))
    if "cnn_output_dim" in fx:  # MultiInputPolicy's, per image part
        out["parts_features"] = int(fx.pop("cnn_output_dim"))
    fx.pop("normalized_image", None)  # read by dict_parts
    if fx:
        raise UsageError(f"GRPO(policy_kwargs=dict(features_extractor_kwargs=...)): not supported here: "
                         f"{', '.join(sorted(fx))} (supported: features_dim for CnnPolicy; cnn_output_dim and "
                         "normalized_image for MultiInputPolicy)")
    if normalize_images is not None and not normalize_images:
        out["image_scale"] = 1.0
    return out


# A continuous action's token form (grpo_seq.sampling.spaces): ours, given in policy_kwargs
ACTION_FORM = ("action_bins", "action_clip")


def action_form(policy_kwargs: dict[str, Any] | None, policy: Any = None) -> dict[str, Any]:
    """``policy_kwargs``' ``action_bins`` and ``action_clip`` (a continuous action's values per
    dimension, and the bounds that replace infinite ones); without bins there, those ``policy``
    was built with (a loaded one's), else None (the env's family's: ``resolve_env``)."""
    kw = policy_kwargs or {}
    clip = kw.get("action_clip")
    bins = kw.get("action_bins") or getattr(policy, "init_kwargs", {}).get("action_bins")
    return {"action_bins": bins, "action_clip": tuple(clip) if clip is not None else None}


def image_options(policy_name: Any, space: Any, policy_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The named policy's options: for ``CnnPolicy`` the image's shape and pixel scale (255 for
    uint8, as SB3 normalises), and the action head straight on the torso's features (SB3's
    net_arch for it is empty); for ``MultiInputPolicy`` on a Dict holding images, its parts
    (:func:`dict_parts`); a name this door does not build is refused."""
    import gymnasium as gym
    import numpy as np

    from .policy import GRPOPolicy

    if policy_name not in ("MlpPolicy", "MultiInputPolicy", "CnnPolicy", GRPOPolicy):
        raise UsageError(f"GRPO(policy={policy_name!r}): 'MlpPolicy', 'CnnPolicy' (images), 'MultiInputPolicy' "
                         "(Dict observations) or an nn.Module class")
    if policy_name in ("MlpPolicy", "CnnPolicy") and isinstance(space, gym.spaces.Dict):  # SB3's rule and words
        raise UsageError(f"GRPO(policy={policy_name!r}): you must use 'MultiInputPolicy' when working with dict "
                         "observation space")
    if policy_name == "MultiInputPolicy" and isinstance(space, gym.spaces.Dict):
        return dict_parts(space, policy_kwargs or {})
    if policy_name != "CnnPolicy":
        return {}
    if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 3):
        raise UsageError(f"GRPO(policy='CnnPolicy'): observations must be images (a Box of 3 dimensions: height, "
                         f"width, channels, or channels first), got {space}; use 'MlpPolicy'")
    return {"image_shape": list(space.shape), "image_scale": 255.0 if space.dtype == np.uint8 else 1.0,
            "hidden_sizes": ()}


def with_extractor(kw: dict[str, Any], space: Any) -> dict[str, Any]:
    """``kw`` with the user's extractor reading ``space`` in place of the torso the policy name would
    build (the extractor is SB3's whole torso: images and Dicts get no other)."""
    import gymnasium as gym

    from ..sampling.spaces import SpaceCodec, space_to_json

    out = {k: v for k, v in kw.items() if k not in ("image_shape", "image_scale", "obs_parts", "image_features")}
    out["extractor"] = {**kw["extractor"], "space": space_to_json(space)}
    if not isinstance(space, gym.spaces.Dict) and len(space.shape or ()) < 3:
        # the raw units SB3 feeds it, stated: the exploration bonus cuts its cells in them
        out.setdefault("obs_scale", [1.0] * SpaceCodec.obs_size(space, "observation"))
    return out


def check_torso_widths(kw: dict[str, Any]) -> None:
    """``features_dim`` sizes CnnPolicy's torso, ``cnn_output_dim`` each image part's of a Dict
    (moved into ``kw["image_features"]``); either elsewhere is refused, as SB3's extractors refuse it."""
    if "image_features" in kw and "image_shape" not in kw:
        raise UsageError("GRPO(policy_kwargs=dict(features_extractor_kwargs=dict(features_dim=...))): the image "
                         "torso's width, for 'CnnPolicy' only")
    if "parts_features" in kw:
        if "obs_parts" not in kw:
            raise UsageError("GRPO(policy_kwargs=dict(features_extractor_kwargs=dict(cnn_output_dim=...))): the width "
                             "of each image part's torso, for 'MultiInputPolicy' on a Dict holding images only")
        kw["image_features"] = kw.pop("parts_features")


def dict_parts(space: Any, policy_kwargs: dict[str, Any]) -> dict[str, Any]:
    """A Dict observation's parts as SB3's ``CombinedExtractor`` reads them
    (:func:`grpo_seq.sampling.spaces.dict_parts`, with ``normalized_image`` and ``normalize_images``
    from ``policy_kwargs``); ``{}`` when none is an image."""
    from ..sampling.spaces import dict_parts as parts_of

    normalized = bool((policy_kwargs.get("features_extractor_kwargs") or {}).get("normalized_image"))
    parts = parts_of(space, normalized, bool(policy_kwargs.get("normalize_images", True)))
    return {"obs_parts": parts} if parts else {}
