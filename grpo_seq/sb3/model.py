"""``GRPO``: Stable-Baselines3's ``PPO`` surface over the env job (:class:`grpo_seq.jobs.env.EnvRun`):
its arguments become an env job spec, and ``learn`` steps that job's run."""

from __future__ import annotations

import random
import time
import warnings
from collections import deque
from typing import Any, Callable

import gymnasium as gym
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn

from ..envs.defaults import ALTERNATIVES_GROUPS, ALTERNATIVES_MAX_DEFAULT_G, per_env
from ..envs.obs_scale import default_obs_scale, rollout_obs_units
from ..errors import UsageError
from ..jobs.budget import cap_env_steps
from ..jobs.env import EnvRun, make_sampler
from ..jobs.env_spec import EnvJob
from . import arguments
from .callbacks import Replaying, as_callback
from .envs import EnvSource, as_vec_env, resolve_env
from .logger import Logger
from .acting import Acting
from .persistence import Persistence
from .reporting import Reporting
from .policy import GRPOPolicy, sb3_device
from ..sampling.spaces import CodecWrapper
from .normalize import ObsNormalizer
from .schedule import FloatSchedule, clip_schedule
from .short_episodes import unregistered_sizing

__all__ = ["GRPO"]

_GROUP_MODES = ("episodes", "alternatives")
_NO_TIME_LIMIT_STEPS = 1000  # an episode's cap in training for an env without a time limit


def _norm_obs(source: EnvSource) -> bool:
    """Whether the policy sees ``source``'s observations through a ``VecNormalize``."""
    return source.normalizer is not None and bool(source.normalizer.norm_obs)


class GRPO(Persistence, Reporting, Acting, Replaying):
    """GRPO with Stable-Baselines3's ``PPO`` interface: swap ``PPO`` for ``GRPO``.

        from grpo_seq import GRPO
        model = GRPO("MlpPolicy", "CartPole-v1", verbose=1).learn(50_000)
        action, _ = model.predict(obs, deterministic=True)

    One thin layer: the arguments become an env job spec (:attr:`config`, an
    :class:`grpo_seq.jobs.env_spec.EnvJob`, the same spec ``grpo-seq train-env`` runs), and
    ``learn`` steps that job's run (:meth:`grpo_seq.jobs.env.EnvRun.step`) until ``total_timesteps``
    env steps, with the env family's defaults: G, the learning rate and its schedule, Adam's betas,
    the loss, the advantages, gamma, the network, the observation units and the bonuses live in
    :mod:`grpo_seq.envs.defaults` (an env without a registered id:
    :data:`grpo_seq.envs.defaults.UNREGISTERED`; the alternatives mode:
    ``ALTERNATIVES_GROUPS`` there), and the options page lists them per env. Constructing it seeds the global
    python, numpy and torch RNGs (as SB3 does with a seed); ``seed=None`` draws one.

    Each Stable-Baselines3 argument, and what it becomes here: the argument table of
    ``docs/guides/sb3.md``.

    Arguments of ours: ``reward_function(state, action, next_state)`` (batched tensors ``(B, obs_dim)``,
    ``(B, 1)``, ``(B, obs_dim)`` -> ``(B,)`` or ``(B, 1)``): the training reward in place of the env's;
    the env still ends episodes, and ``rollout/ep_rew_mean`` and evaluation report the env's own
    return. ``group_mode="alternatives"``: groups of actions tried at one state
    (:class:`grpo_seq.sampling.alternatives.AlternativesSampler`) with ``horizon`` env steps each;
    ``max_episode_steps`` for an env without a time limit; ``exploration_bonus`` (None: the env
    program's default, 0: none; :class:`grpo_seq.sampling.novelty.NoveltyBonus`); and any :class:`LoopConfig` field
    (``num_groups``, ``beta``, ``loss_type``, ...). Any other argument is a :class:`UsageError`.
    """

    def __init__(self, policy: str | type[nn.Module], env: Any, reward_function: Any = None,
                 learning_rate: Any = None, n_steps: int | None = None, batch_size: int | None = None,
                 n_epochs: int | None = None, gamma: float | None = None, group_size: int | None = None,
                 clip_range: Any = None, ent_coef: float | None = None, max_grad_norm: float | None = None,
                 seed: int | None = None, verbose: int = 0, tensorboard_log: str | None = None,
                 policy_kwargs: dict[str, Any] | None = None, device: str = "auto", stats_window_size: int = 100,
                 group_mode: str = "episodes", horizon: int = 1, max_episode_steps: int | None = None,
                 exploration_bonus: float | None = None, _policy: nn.Module | None = None, **kwargs: Any):
        if "target_kl" in kwargs and kwargs["target_kl"] is None:  # PPO's None, given: no limit
            kwargs["target_kl"] = 0.0  # (left out, the env's default applies)
        ppo_only = {k: kwargs.pop(k) for k in list(kwargs) if k in arguments.PPO_ONLY}
        sb3 = dict(learning_rate=learning_rate, n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs, gamma=gamma,
                   group_size=group_size, clip_range=clip_range, max_grad_norm=max_grad_norm, ent_coef=ent_coef)
        arguments.warn_ignored(sb3, ppo_only)
        if group_mode not in _GROUP_MODES:
            raise UsageError(f"GRPO(group_mode={group_mode!r}): one of {_GROUP_MODES}")
        self.policy_name, self.policy_kwargs = policy, dict(policy_kwargs or {})
        self.policy_kwargs.update(arguments.check_net_arch(self.policy_kwargs))
        self._optimizer = arguments.optimizer_choice(self.policy_kwargs)
        self.reward_function, self.group_mode, self.horizon = reward_function, group_mode, int(horizon)
        self.exploration_bonus = exploration_bonus  # None: the env program's default for this env
        self.verbose, self.tensorboard_log = verbose, tensorboard_log
        self.device = sb3_device(device)
        _recommend_cpu(self.device, policy)
        self.seed = int(seed) if seed is not None else random.SystemRandom().randrange(2**31)
        self._sb3, self._ours, self._max_episode_steps = sb3, kwargs, max_episode_steps
        self._lr_schedule = arguments.step_schedule("learning_rate", learning_rate)
        self._clip_schedule = arguments.step_schedule("clip_range", clip_range)
        self._logger, self._custom_logger = Logger(verbose), False
        self.ep_info_buffer: deque = deque(maxlen=stats_window_size)
        self.ep_success_buffer: deque = deque(maxlen=stats_window_size)
        self.num_timesteps, self._run, self._source, self._actors, self._last_obs = 0, None, None, {}, None
        self.env = self.observation_space = self.action_space = None
        self.n_envs = 1
        set_seed(self.seed)  # before the policy's initial weights are drawn, as the recipe does
        if env is None and _policy is None:
            raise UsageError("GRPO needs an env (a gymnasium env, an env id or a VecEnv); GRPO.load takes env=None")
        source = resolve_env(env, **arguments.action_form(self.policy_kwargs, _policy)) if env is not None else None
        self.policy = _policy if _policy is not None else self._make_policy(source)
        self.policy = self.policy.to(self.device)
        self.observation_space = getattr(self.policy, "observation_space", None)
        self.action_space = getattr(self.policy, "action_space", None)
        self._check_config(source)
        self._sb3_attributes(learning_rate, clip_range)
        if source is not None:
            self.set_env(source)
        self.set_random_seed(self.seed)

    def _sb3_attributes(self, learning_rate: Any, clip_range: Any) -> None:
        """PPO's hyperparameter attributes, read by SB3 callbacks (``model.learning_rate``, ...)."""
        cfg = self.config
        self.learning_rate = learning_rate if learning_rate is not None else cfg.learning_rate
        self.lr_schedule = FloatSchedule(self.learning_rate, linear=not callable(learning_rate) and cfg.lr_schedule == "linear")
        self.clip_range = clip_schedule(clip_range if clip_range is not None else cfg.epsilon)
        self.gamma, self.n_epochs, self.ent_coef, self.max_grad_norm = cfg.gamma, cfg.mu, cfg.ent_coef, cfg.max_grad_norm
        self.n_steps, self.batch_size = self._sb3["n_steps"], arguments.effective_batch_size(self._sb3)
        self.policy_class = type(self.policy)

    def set_random_seed(self, seed: int | None = None) -> None:
        """Seed python, numpy and torch, the action space and the env (SB3's ``set_random_seed``)."""
        if seed is None:
            return
        set_seed(int(seed))
        if self.action_space is not None:
            self.action_space.seed(int(seed))
        if self.env is not None and hasattr(self.env, "seed"):
            self.env.seed(int(seed))

    # -- construction ------------------------------------------------------------------------------

    def _make_policy(self, source: EnvSource) -> nn.Module:
        env, codec = source.env, source.codec
        if isinstance(self.policy_name, type) and issubclass(self.policy_name, nn.Module) and \
                not issubclass(self.policy_name, GRPOPolicy):
            return self.policy_name(codec.obs_dim, codec.num_actions, **self.policy_kwargs)
        kw = {"hidden_sizes": (64, 64), "orthogonal_init": True, **arguments.image_options(self.policy_name, env.observation_space, self.policy_kwargs),
              **arguments.policy_options(self.policy_kwargs)}
        if "extractor" in kw:  # the user's torso reads the observations as SB3's would reach it
            kw = arguments.with_extractor(kw, env.observation_space)
        arguments.check_torso_widths(kw)
        if codec.action_values is not None:  # a continuous action: the values the env's codec took, its env's head
            family = per_env(_env_id(source))
            kw.setdefault("action_bins", codec.action_values.shape[1])
            kw.setdefault("action_head", family["action_head"])
            if kw["action_head"] == "gaussian":
                kw.setdefault("log_std_init", family["log_std_init"])
        if "obs_scale" not in kw and "extractor" not in kw:
            kw.update(_obs_units(source, self.seed or 0))
        return GRPOPolicy(env.observation_space, env.action_space, **kw)

    @property
    def _trainer(self) -> Any:
        """The run's :class:`grpo_seq.GRPOLoop` (None before an env is set)."""
        return self._run.trainer if self._run is not None else None

    @property
    def run(self) -> EnvRun | None:
        """The env job's run that ``learn`` steps: ``run.state`` holds its evaluations (with
        ``eval_every``: ``solved_at``, ``best``, ``last_eval``)."""
        return self._run

    def _num_actions(self) -> int:
        return int(self.policy.init_kwargs["num_actions"]) if hasattr(self.policy, "init_kwargs") else \
            int(self._source.env.action_space.n)

    def _check_config(self, source: EnvSource | None) -> None:
        """Build (and so validate) the LoopConfig now, so a bad argument fails at construction."""
        ours, alt = dict(self._ours), self.group_mode == "alternatives"
        if alt:
            _alternatives_defaults(self._sb3, ours, self._num_actions if source is None else lambda: source.codec.num_actions)
        limit = self._episode_limit(source)
        if not alt and source is not None and _env_id(source) is None:  # sized by its measured episodes
            limit, groups = unregistered_sizing(source.make, self.seed or 0, self._sb3, ours, limit,
                                                self.policy_name == "CnnPolicy",
                                                bool(self._max_episode_steps or source.time_limit))
            if groups:  # kept in the model's arguments, so a saved model trains on with them
                ours["num_groups"] = self._ours["num_groups"] = groups
        G = self._sb3["group_size"] or ours.get("num_generations", arguments.SURFACE_DEFAULTS["num_generations"])
        per_group = G * self.horizon + 1 if alt else None
        surface = {"seed": self.seed, "max_episode_steps": self._max_episode_steps, "group_mode": self.group_mode,
                   "horizon": self.horizon, "every_action": alt and self._sb3["group_size"] is None
                   and "num_generations" not in self._ours}
        if self.exploration_bonus is not None:
            surface["exploration_bonus"] = self.exploration_bonus
        self.config: EnvJob = arguments.build_config(self._sb3, ours, source.n_envs if source else 1,
                                                     limit, per_group, _env_id(source), surface,
                                                     images=self.policy_name == "CnnPolicy")

    def _episode_limit(self, source: EnvSource | None) -> int:
        """An episode's most steps in training: ``max_episode_steps``, the env's time limit, else
        :data:`_NO_TIME_LIMIT_STEPS` (SB3 needs none: its rollouts are cut by ``n_steps``)."""
        return int(self._max_episode_steps or (source.time_limit if source else None) or _NO_TIME_LIMIT_STEPS)

    def _make_sampler(self, source: EnvSource) -> Any:
        """The env job's sampler (:func:`grpo_seq.jobs.env.make_sampler`) over the user's env: its
        maker or its own objects, the ``reward_function``, a ``VecNormalize``'s view of observations."""
        alt = self.group_mode == "alternatives"
        if alt and source.normalizer is not None:
            raise UsageError("GRPO(group_mode='alternatives') with a VecNormalize env: alternatives are scored "
                             "from copies of the raw env; pass the env without VecNormalize")
        obs_scale = getattr(self.policy, "init_kwargs", {}).get("obs_scale")
        return make_sampler(self.config, 0, obs_scale, env_fn=source.make if alt or not source.env_id else None,
                            reward_fn=self.reward_function, env_objects=None if alt else source.objects,
                            obs_transform=ObsNormalizer(source.normalizer, source.codec.obs_space) if _norm_obs(source) else None,
                            max_episode_steps=self._episode_limit(source))

    def set_env(self, env: Any, force_reset: bool = True) -> None:
        """Train on ``env`` from now on: the same spaces and number of envs as the model's (SB3's
        checks); ``force_reset=False`` keeps the last observation (SB3's ``_last_obs``)."""
        source = env if isinstance(env, EnvSource) else resolve_env(env, **arguments.action_form(self.policy_kwargs, self.policy))
        if self._source is not None and source.n_envs != self.n_envs:
            raise AssertionError(f"The number of environments to be set is different from the number of environments "
                                 f"in the model: ({source.n_envs} != {self.n_envs}), whereas `set_env` requires them "
                                 "to be the same. To load a model with a different number of environments, you must "
                                 "use `load` method")
        codec = source.codec
        kw = getattr(self.policy, "init_kwargs", {"obs_dim": codec.obs_dim, "num_actions": codec.num_actions})
        if (kw["obs_dim"], kw["num_actions"]) != (codec.obs_dim, codec.num_actions):
            raise ValueError(f"Observation and action spaces do not match: the policy takes {kw['obs_dim']} "
                             f"observation numbers and {kw['num_actions']} actions; this env has {codec.obs_dim} "
                             f"and {codec.num_actions}")
        sampler = self._make_sampler(source)
        if self._run is None:
            self._run = EnvRun(self.config, policy=self.policy, sampler=sampler,
                               accelerator=ModelDeviceAccelerator(self.device), make_optimizer=self._make_optimizer())
        else:
            self._run.replace_sampler(sampler)
        self._source, self._sampler_steps = source, sampler.env_steps
        self.env, self.n_envs = as_vec_env(source), source.n_envs
        if force_reset:
            self._last_obs = None

    def _make_optimizer(self) -> Callable[[list], Any] | None:
        """SB3's ``policy_kwargs`` ``optimizer_class`` / ``optimizer_kwargs`` in place of AdamW (None: AdamW)."""
        if self._optimizer is None:
            return None
        optimizer_class, optimizer_kwargs = self._optimizer
        return lambda params: optimizer_class(params, lr=self.config.learning_rate, **optimizer_kwargs)

    def get_env(self) -> Any:
        """The training env as SB3 returns it (a VecEnv, where SB3 is installed), or None."""
        return self.env

    def get_vec_normalize_env(self) -> Any:
        """The ``VecNormalize`` the model trains through, or None (SB3 callbacks ask)."""
        return self._source.normalizer if self._source is not None else None

    # -- training ----------------------------------------------------------------------------------

    def learn(self, total_timesteps: int, callback: Any = None, log_interval: int = 1, tb_log_name: str = "GRPO",
              reset_num_timesteps: bool = True, progress_bar: bool = False) -> "GRPO":
        """Train until ``num_timesteps`` reaches ``total_timesteps`` (plus the steps so far, when
        ``reset_num_timesteps=False``); returns ``self``. ``callback``: an SB3 callback, a list of them,
        or ``f(locals, globals) -> bool`` (``False`` stops)."""
        if self._trainer is None:
            raise UsageError("GRPO.learn needs an env: pass one to GRPO.load(path, env=...) or call set_env(env)")
        total_timesteps = cap_env_steps(int(total_timesteps))  # GRPO_SEQ_QUICK: a smoke test's budget
        if reset_num_timesteps:
            self.num_timesteps = 0
            self.ep_info_buffer.clear()
            self.ep_success_buffer.clear()
        start, total = self.num_timesteps, self.num_timesteps + int(total_timesteps) if not reset_num_timesteps \
            else int(total_timesteps)
        self._configure_logger(tb_log_name, reset_num_timesteps)
        # the run's budget in its own env-step count: evaluations are due by it, the last at its end
        self.config.total_env_steps = self._run.env_steps + total - self.num_timesteps
        cb = as_callback(callback)
        cb.init_callback(self)
        bar = self._progress_bar(progress_bar, total - start)
        state = {"self": self, "total_timesteps": total, "callback": cb, "log_interval": log_interval, "iteration": 0}
        cb.on_training_start(state, globals())
        t0, go_on = time.perf_counter(), True
        while go_on and self.num_timesteps < total and not self._done(total):
            cb.on_rollout_start()
            metrics, new = self._one_update((self.num_timesteps - start) / max(1, total - start))
            state.update(iteration=state["iteration"] + 1, metrics=metrics)
            cb.update_locals(state)
            go_on = self._replay_steps(cb, new) if callback is not None else True
            if go_on:
                self.num_timesteps = self._sampler_total  # exact, whatever n_envs
            cb.on_rollout_end()
            if bar is not None:
                bar.update(min(new, total - bar.n))
            if log_interval and state["iteration"] % log_interval == 0:
                self._dump_logs(metrics, state["iteration"], start, t0)
        cb.on_training_end()
        if bar is not None:
            bar.close()
        return self

    def _done(self, total: int) -> bool:
        """Whether the run is done, after making room for a last step: as PPO, ``learn`` takes at least
        ``total_timesteps`` (where less is left than a step needs, the budget grows to hold one)."""
        run = self._run
        if self.num_timesteps < total and 0 < run.budget_left < run.step_cost:
            self.config.total_env_steps += run.step_cost - run.budget_left
        return run.done

    def _one_update(self, progress: float) -> tuple[dict[str, float], int]:
        """One step of the run (:meth:`EnvRun.step`: an update, and an evaluation when one is due);
        returns its metrics and the env steps it took."""
        trainer = self._trainer
        lr = float(self._lr_schedule(1.0 - progress)) if self._lr_schedule is not None else None
        eps = float(self._clip_schedule(1.0 - progress)) if self._clip_schedule is not None else None
        metrics, _ = self._run.step(progress, learning_rate=lr, epsilon=eps)
        self._actors.clear()  # the weights changed
        sampler = trainer.sampler
        new, self._sampler_steps = sampler.env_steps - self._sampler_steps, sampler.env_steps
        self._sampler_total = self.num_timesteps + new
        cut = sampler.last_episode_cut  # episodes cut short by learn's budget (SB3 would go on with them)
        for r, n, was_cut in zip(sampler.last_episode_returns, sampler.last_episode_lengths, cut):
            if not was_cut:
                self.ep_info_buffer.append({"r": float(r), "l": int(n), "t": round(time.perf_counter(), 6)})
        for env in getattr(sampler, "env_list", ()):
            if isinstance(env, CodecWrapper):
                self.ep_success_buffer.extend(env.successes)
                env.successes.clear()
        batch = sampler.last_batch
        if batch is not None and self._source.codec is not None and batch.context.dim() == 3:
            self._last_obs = self._source.codec.decode_obs(batch.context[: self.n_envs, -1].numpy())
        return metrics, new

    def _progress_bar(self, show: bool, total: int) -> Any:
        if not show:
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, unit="step")



class ModelDeviceAccelerator(Accelerator):
    """One process, the model's own device. SB3 lets each model of a process pick its device
    (``device="cpu"`` beside ``"cuda"``); accelerate keeps one device per process, fixed by the first
    ``Accelerator``, and refuses ``cpu=True`` once that is a GPU. So this one leaves the state's
    device alone (``cpu=False`` never conflicts), places nothing, and answers ``device`` with the
    model's: the trainer moves batches and the reference copy there."""

    def __init__(self, device: torch.device):
        super().__init__(device_placement=False)
        self._model_device = torch.device(device)

    @property
    def device(self) -> torch.device:
        return self._model_device


def _alternatives_defaults(sb3: dict[str, Any], ours: dict[str, Any], num_actions: Callable[[], int]) -> None:
    """The alternatives mode's defaults in ``ours``: outcome advantages, ALTERNATIVES_GROUPS states per
    update (without ``n_steps``), and every action tried at a state (without a group size, refused past
    ALTERNATIVES_MAX_DEFAULT_G actions; ``num_actions`` is asked only then)."""
    ours.setdefault("advantage", "outcome")
    if sb3["n_steps"] is None:
        ours.setdefault("num_groups", ALTERNATIVES_GROUPS)
    if sb3["group_size"] is None and "num_generations" not in ours:
        n = num_actions()
        if n > ALTERNATIVES_MAX_DEFAULT_G:
            raise UsageError(f"group_mode='alternatives' tries every action at a state by default, and this "
                             f"action space has {n}; pass group_size (at most {ALTERNATIVES_MAX_DEFAULT_G} "
                             "is usual) to try a sample of them")
        ours["num_generations"] = n


def _recommend_cpu(device: torch.device, policy: Any) -> None:
    """SB3's warning for an MLP policy on a GPU: rollouts act through a numpy copy of the weights
    either way, so only the update runs there, in kernels too small to fill it."""
    if device.type == "cuda" and policy == "MlpPolicy":
        warnings.warn("You are trying to run GRPO on the GPU with an MlpPolicy; it is meant to run on the CPU. "
                      "Pass device='cpu' (or export CUDA_VISIBLE_DEVICES=) to use the CPU. The model will train, "
                      "but the GPU will be mostly idle and training may take longer than on the CPU.", UserWarning,
                      stacklevel=3)


def _obs_units(source: EnvSource, seed: int) -> dict[str, Any]:
    """``obs_scale`` (and ``obs_shift``) where ``policy_kwargs`` give none: 1s in VecNormalize's units,
    else as the env program takes them for a flat Box: CartPole's thresholds, else random play's."""
    env, codec = source.env, source.codec
    if _norm_obs(source):  # VecNormalize's units already: nothing to rescale
        return {"obs_scale": [1.0] * codec.obs_dim}
    if not (isinstance(env.observation_space, gym.spaces.Box) and len(env.observation_space.shape) == 1):
        return {}
    units = {"obs_scale": default_obs_scale(env)}
    env_id = _env_id(source)
    if units["obs_scale"] is None and env_id not in (None, *arguments.CARTPOLE_IDS):
        copy = source.make()  # random play steps a copy, never the user's env
        units["obs_shift"], units["obs_scale"] = rollout_obs_units(copy, per_env(env_id)["obs_center"], seed=seed)
        copy.close()
    return units


def _env_id(source: EnvSource | None) -> str | None:
    """The registered id of the user's env, where it has one."""
    if source is None:
        return None
    spec = source.env.spec
    return source.env_id or (spec.id if spec is not None else None)
