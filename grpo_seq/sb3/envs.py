"""What ``GRPO(policy, env)`` accepts as ``env``, and the envs the group sampler steps.

The members of a group start from the same state: each is reset with the group's seed. A
registered env the user added no wrappers to (or only SB3's ``Monitor``) runs on fresh copies
from its registration (``gym.make(spec.id, **spec.kwargs)``), all of a rollout's episodes at once
(CartPole's numpy-vectorised env among them); one with recorded wrappers on copies from
``gym.make(env.spec)``. Any other env is the user's own objects (a ``DummyVecEnv``'s envs), stepped
in place one episode after another on each, so an env whose episodes depend on the ones it has run
(a curriculum, a success counter) sees them in order, as under PPO. Its ``copy.deepcopy`` is
still what ``group_mode="alternatives"`` snapshots from, and only that mode refuses by name an env
that cannot be deep-copied.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium as gym

from ..envs.defaults import per_env
from ..errors import UsageError
from ..jobs.env import env_name, is_registered, make_env
from ..sampling.spaces import CodecWrapper, SpaceCodec
from .vec_wrappers import per_env_wrappers

__all__ = ["EnvSource", "resolve_env", "as_vec_env"]


@dataclass
class EnvSource:
    """One user env, and how to make more of it."""

    env: gym.Env  # the user's own (or, from an id, one made for get_env()), with any per-env VecEnv wrappers
    env_id: str | None  # a registered id whose plain make gives the same env (the sampler's fast path)
    make: Callable[[], gym.Env]
    n_envs: int  # of the user's VecEnv: SB3 callbacks count calls per n_envs timesteps
    vec_env: Any = None  # the user's VecEnv, returned by get_env()
    codec: SpaceCodec | None = None  # the env's spaces as the policy's flat observations and tokens
    time_limit: int | None = None  # the registered time limit, where there is one
    objects: list[gym.Env] | None = None  # the user's own envs, stepped in place (no id, no recorded wrappers)
    normalizer: Any = None  # the user's VecNormalize, whose observation statistics the policy sees through


def _only_plain_wrappers(env: gym.Env) -> bool:
    spec = env.spec
    extra = [w.name for w in (spec.additional_wrappers if spec else ())]
    return spec is not None and set(extra) <= {"Monitor"}


def _maker(env: gym.Env) -> tuple[str | None, Callable[[], gym.Env], bool]:
    """A registered id (or None), how to make a fresh env, and whether that is a deep copy. A spec
    whose id nothing registers (an env class that names itself, as SB3's BitFlippingEnv does) makes
    nothing: the env is copied."""
    spec = env.spec if env.spec is not None and is_registered(env.spec.id) else None
    if spec is not None and _only_plain_wrappers(env):
        kwargs = dict(spec.kwargs)
        limit = spec.max_episode_steps
        return spec.id, lambda: make_env(spec.id, tokens=False, max_episode_steps=limit, **kwargs), False
    if spec is not None:
        try:
            gym.make(spec).close()
            return None, lambda: gym.make(spec), False
        except Exception:  # a wrapper whose arguments were not recorded: try a copy instead
            pass
    return None, _copier(_without_monitor(env)), True


def _copier(env: gym.Env) -> Callable[[], gym.Env]:
    """``copy.deepcopy(env)``, or where it cannot be copied, a maker that says so by name when
    called (only ``group_mode="alternatives"`` needs copies of an env that is stepped in place)."""
    try:
        copy.deepcopy(env).close()
    except Exception as e:
        error = UsageError(
            f"GRPO(group_mode='alternatives') needs copies of the env {env_name(env)} to try each action from one "
            f"state, but it is neither registered (env.spec) nor deep-copyable ({type(e).__name__}: {e}); register "
            "it with gymnasium.register, or pass its id")

        def refuse() -> gym.Env:
            raise error

        return refuse
    return lambda: copy.deepcopy(env)


def _without_monitor(env: gym.Env) -> gym.Env:
    """The env inside SB3's outer ``Monitor`` wrappers: they only record (the copies' episodes are
    not the user's), and one writing a file cannot be copied."""
    while isinstance(env, gym.Wrapper) and type(env).__name__ == "Monitor":
        env = env.env
    return env


def resolve_env(env: Any, action_bins: int | None = None, action_clip: tuple[float, float] | None = None) -> EnvSource:
    """An :class:`EnvSource` for a gymnasium env, an env id or an SB3 ``VecEnv`` (a continuous
    action cut into ``action_bins`` values per dimension; None: a registered env's family's, as
    its job takes)."""
    vec_env, n_envs, normalizer, wrappers = None, 1, _vec_normalize(env), per_env_wrappers(env)
    if isinstance(env, str):
        env = make_env(env, tokens=False)
    elif hasattr(env, "num_envs") and hasattr(env, "step_async"):  # an SB3 VecEnv
        vec_env, n_envs = env, int(env.num_envs)
        envs = getattr(env, "envs", None)
        if envs:
            env = envs[0]
        else:  # SubprocVecEnv: the env lives in another process; its spec is all there is
            env = _from_spec(env.get_attr("spec", [0])[0])
    if not isinstance(env, gym.Env):
        raise UsageError(f"GRPO(env=...): a gymnasium env, an env id or a Stable-Baselines3 VecEnv, got "
                         f"{type(env).__name__}")
    spaces = _wrapped(wrappers, env)  # the observations the user's VecEnv hands predict
    if action_bins is None and env.spec is not None:  # a registered env: its family's values, as its job takes
        action_bins = per_env(env.spec.id).get("action_bins")
    codec = SpaceCodec(spaces.observation_space, env.action_space, env_name(env), action_bins, action_clip)
    env_id, make, copied = _maker(env)
    objects = None
    if copied:  # no registration makes it again: step the user's own objects rather than copies
        objects = [_without_monitor(e) for e in (getattr(vec_env, "envs", None) or [env])]
    if wrappers:  # VecFrameStack, VecTransposeImage: the same, per env
        env_id, unwrapped = None, make
        make = lambda: _wrapped(wrappers, unwrapped())  # noqa: E731
        objects = [_wrapped(wrappers, e) for e in objects] if objects else None
    if not codec.identity:  # the sampler's envs see flat observations and token actions
        env_id, plain = None, make
        make = lambda: CodecWrapper(plain(), codec)  # noqa: E731
        objects = [CodecWrapper(e, codec) for e in objects] if objects else None
    limit = env.spec.max_episode_steps if env.spec is not None else None
    return EnvSource(env=spaces, env_id=env_id, make=make, n_envs=n_envs, vec_env=vec_env, codec=codec, time_limit=limit,
                     objects=objects, normalizer=normalizer)


def _vec_normalize(env: Any) -> Any:
    """The ``VecNormalize`` among an SB3 ``VecEnv``'s wrappers (``venv`` chain), or None. The
    sampler normalises the observations of the envs it steps, after the per-env equivalents of the
    space-changing wrappers (:mod:`.vec_wrappers`), so a ``VecNormalize`` under one of those is refused."""
    found, changed_by = None, None
    while hasattr(env, "venv") and hasattr(env, "step_async"):
        if "obs_rms" in vars(env) and hasattr(env, "normalize_obs"):  # its own, not forwarded from below
            if found is not None:
                raise UsageError("GRPO: a VecNormalize inside another VecNormalize; wrap the env in one")
            if changed_by is not None:
                raise UsageError(f"GRPO: a VecNormalize inside {changed_by}; put the VecNormalize outside it")
            found = env
        elif env.observation_space != env.venv.observation_space:
            changed_by = type(env).__name__
        env = env.venv
    return found


def _wrapped(wrappers: list, env: gym.Env) -> gym.Env:
    for wrap in wrappers:
        env = wrap(env)
    return env


def _from_spec(spec: Any) -> gym.Env:
    """An env like a SubprocVecEnv's, from its spec: the wrappers gymnasium recorded where they can be
    made again, else the registered env (SB3's ``Monitor`` only records, and cannot be)."""
    if spec is None:
        raise UsageError("GRPO: this VecEnv's envs have no spec (not registered); pass a gymnasium env or id")
    try:
        return gym.make(spec)
    except Exception:  # a wrapper whose arguments were not recorded, such as Monitor
        return make_env(spec.id, tokens=False, max_episode_steps=spec.max_episode_steps, **spec.kwargs)


def as_vec_env(source: EnvSource) -> Any:
    """The env as SB3 callbacks and ``evaluate_policy`` expect it: SB3's own wrapping (a
    ``DummyVecEnv`` over the env in a ``Monitor``, as ``model.env`` is in SB3), or the gymnasium
    env where Stable-Baselines3 is not installed."""
    if source.vec_env is not None:
        return source.vec_env
    try:
        from stable_baselines3.common.base_class import BaseAlgorithm
    except ImportError:
        return source.env
    source.vec_env = BaseAlgorithm._wrap_env(source.env, verbose=0, monitor_wrapper=True)
    return source.vec_env
