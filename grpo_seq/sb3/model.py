"""``GRPO``: Stable-Baselines3's ``PPO`` surface over the env job (:class:`grpo_seq.jobs.env.EnvRun`):
its arguments become an env job spec, and ``learn`` steps that job's run."""

from __future__ import annotations

import random
import time
import warnings
from collections import deque
from typing import Any, Callable

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn

from ..envs.defaults import ALTERNATIVES_GROUPS, ALTERNATIVES_MAX_DEFAULT_G, per_env
from ..envs.obs_scale import default_obs_scale, rollout_obs_units
from ..errors import UsageError
from ..jobs.budget import cap_env_steps
from ..jobs.env import EnvRun, make_actor, make_sampler
from ..jobs.env_spec import EnvJob
from . import arguments
from .callbacks import as_callback, rollout_locals
from .envs import EnvSource, as_vec_env, resolve_env
from .logger import Logger, tensorboard_run_dir
from .persistence import Persistence
from .policy import GRPOPolicy, sb3_device
from ..sampling.spaces import CodecWrapper
from .normalize import ObsNormalizer
from .schedule import FloatSchedule

__all__ = ["GRPO"]

_GROUP_MODES = ("episodes", "alternatives")
_NO_TIME_LIMIT_STEPS = 1000  # an episode's cap in training for an env without a time limit


def _norm_obs(source: EnvSource) -> bool:
    """Whether the policy sees ``source``'s observations through a ``VecNormalize``."""
    return source.normalizer is not None and bool(source.normalizer.norm_obs)


class GRPO(Persistence):
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

    Stable-Baselines3 arguments, and what they are here:

    | SB3 argument | here |
    |---|---|
    | ``policy="MlpPolicy"`` | :class:`grpo_seq.sb3.policy.GRPOPolicy`, SB3's policy interface without the value head (or an ``nn.Module`` class, built as ``cls(obs_dim, num_actions, **policy_kwargs)``) |
    | ``policy_kwargs`` | ``net_arch`` (a list, ``dict(pi=...)``, or None) -> hidden sizes; ``activation_fn`` (``nn.Tanh``, ``nn.ReLU``); ``ortho_init``; ``optimizer_class`` / ``optimizer_kwargs``; ours: ``obs_scale`` |
    | ``learning_rate`` (float or schedule) | ``learning_rate``; a float is a fixed rate, as in SB3 (``lr_schedule="linear"`` decays it to 0 over ``learn``; no rate given: the env program's rate and linear decay); a schedule ``f(progress_remaining)`` is followed as given |
    | ``n_steps`` | env steps per update (x ``n_envs``): groups per update = that / (G x ``max_episode_steps``) (alternatives: / (G x horizon + 1)), at least 1; where one group of the env family's G episodes would not fit, G shrinks to the episodes that do (at least 2; not a ``group_size`` given) |
    | ``batch_size`` | ``minibatch_tokens``: minibatches of ``batch_size`` env steps drawn from the whole rollout, as PPO's (a loss over whole episodes, ``loss_type`` grpo or dr_grpo or GSPO's sequence ratio: ``num_minibatches``, as many minibatches of whole episodes as fit); not given, PPO's 64 where ``n_steps`` is given, else the env program's update |
    | ``n_epochs`` | ``mu``: update passes per batch |
    | ``clip_range`` (float or schedule) | ``epsilon`` (a schedule is followed as given) |
    | ``gamma`` | ``gamma`` inside the step-wise returns-to-go |
    | ``group_size`` (not in PPO) | ``num_generations`` (G) |
    | ``max_grad_norm`` | ``max_grad_norm`` |
    | ``ent_coef`` | ``ent_coef``: the entropy bonus, added to the objective per token (None: the env program's default for the env, 0 elsewhere) |
    | ``seed``, ``verbose``, ``device`` | the same (``device="auto"``: a GPU where there is one, as SB3, with SB3's advice to pass ``device="cpu"`` for an MLP) |
    | ``tensorboard_log`` | scalars under ``<tensorboard_log>/<tb_log_name>_<n>/`` (needs tensorboard) |
    | ``stats_window_size`` | episodes in ``rollout/ep_rew_mean`` (100) |
    | ``gae_lambda``, ``vf_coef``, ``clip_range_vf``, ``normalize_advantage``, ``sde_sample_freq``, ``target_kl``, ``rollout_buffer_class``, ``rollout_buffer_kwargs`` | no critic here: silent at PPO's default, else named in one warning, ignored; ``use_sde=True`` refused |

    Arguments of ours: ``reward_function(state, action, next_state)`` (batched tensors ``(B, obs_dim)``,
    ``(B, 1)``, ``(B, obs_dim)`` -> ``(B,)`` or ``(B, 1)``): the training reward in place of the env's;
    the env still ends episodes, and ``rollout/ep_rew_mean`` and evaluation report the env's own
    return. ``group_mode="alternatives"``: groups of actions tried at one state
    (:class:`grpo_seq.sampling.alternatives.AlternativesSampler`) with ``horizon`` env steps each;
    ``max_episode_steps`` for an env without a time limit; ``exploration_bonus`` (None: the env
    program's default, 0: none; :class:`grpo_seq.sampling.novelty.NoveltyBonus`); and any :class:`GRPOConfig` field
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
        self._lr_schedule = arguments.split_schedule("learning_rate", learning_rate)[1] if learning_rate is not None else None
        self._clip_schedule = arguments.split_schedule("clip_range", clip_range)[1] if clip_range is not None else None
        self._logger, self._custom_logger = Logger(verbose), False
        self.ep_info_buffer: deque = deque(maxlen=stats_window_size)
        self.ep_success_buffer: deque = deque(maxlen=stats_window_size)
        self.num_timesteps, self._run, self._source, self._actors, self._last_obs = 0, None, None, {}, None
        self.env = self.observation_space = self.action_space = None
        self.n_envs = 1
        set_seed(self.seed)  # before the policy's initial weights are drawn, as the recipe does
        if env is None and _policy is None:
            raise UsageError("GRPO needs an env (a gymnasium env, an env id or a VecEnv); GRPO.load takes env=None")
        source = resolve_env(env) if env is not None else None
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
        self.clip_range = FloatSchedule(clip_range if clip_range is not None else cfg.epsilon)
        self.gamma, self.n_epochs, self.ent_coef, self.max_grad_norm = cfg.gamma, cfg.mu, cfg.ent_coef, cfg.max_grad_norm
        self.n_steps, self.batch_size = self._sb3["n_steps"], arguments.effective_batch_size(self._sb3)
        self.policy_class = type(self.policy)

    @property
    def logger(self) -> Any:
        """What SB3 callbacks record to: SB3's own ``Logger`` (where Stable-Baselines3 is
        installed: its ``output_formats``, ``dir``) as SB3 configures it in ``learn``, else
        :class:`grpo_seq.sb3.logger.Logger`."""
        return self._logger

    def set_logger(self, logger: Any) -> None:
        """Use ``logger`` from now on; ``learn`` no longer configures one (as SB3's ``set_logger``)."""
        self._logger, self._custom_logger = logger, True

    def _configure_logger(self, tb_log_name: str, reset_num_timesteps: bool) -> None:
        if self._custom_logger:
            return
        try:
            from stable_baselines3.common.utils import configure_logger
        except ImportError:
            self._logger = Logger(self.verbose)
            if self.tensorboard_log:
                self._logger.open_tensorboard(tensorboard_run_dir(self.tensorboard_log, tb_log_name,
                                                                  reset_num_timesteps))
            return
        self._logger = configure_logger(self.verbose, self.tensorboard_log, tb_log_name, reset_num_timesteps)

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
        if self.policy_name not in ("MlpPolicy", GRPOPolicy):
            raise UsageError(f"GRPO(policy={self.policy_name!r}): 'MlpPolicy' or an nn.Module class (no CNN or "
                             "multi-input policies here)")
        kw = {"hidden_sizes": (64, 64), "orthogonal_init": True, **arguments.policy_options(self.policy_kwargs)}
        if "obs_scale" not in kw and _norm_obs(source):  # VecNormalize's units already: nothing to rescale
            kw["obs_scale"] = [1.0] * codec.obs_dim
        if "obs_scale" not in kw and codec.identity:  # as the env program: CartPole's thresholds, else random play's
            kw["obs_scale"] = default_obs_scale(env)
            env_id = _env_id(source)
            if kw["obs_scale"] is None and env_id not in (None, *arguments.CARTPOLE_IDS):
                copy = source.make()  # random play steps a copy, never the user's env
                kw["obs_shift"], kw["obs_scale"] = rollout_obs_units(copy, per_env(env_id)["obs_center"],
                                                                     seed=self.seed or 0)
                copy.close()
        return GRPOPolicy(env.observation_space, env.action_space, **kw)

    @property
    def _trainer(self) -> Any:
        """The run's :class:`grpo_seq.GRPOTrainer` (None before an env is set)."""
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
        """Build (and so validate) the GRPOConfig now, so a bad argument fails at construction."""
        ours, alt = dict(self._ours), self.group_mode == "alternatives"
        if alt:
            ours.setdefault("advantage", "outcome")
            if self._sb3["n_steps"] is None:
                ours.setdefault("num_groups", ALTERNATIVES_GROUPS)
            if self._sb3["group_size"] is None and "num_generations" not in ours:
                n = self._num_actions() if source is None else source.codec.num_actions
                if n > ALTERNATIVES_MAX_DEFAULT_G:
                    raise UsageError(f"group_mode='alternatives' tries every action at a state by default, and this "
                                     f"action space has {n}; pass group_size (at most {ALTERNATIVES_MAX_DEFAULT_G} "
                                     "is usual) to try a sample of them")
                ours["num_generations"] = n
        limit = self._episode_limit(source)
        G = self._sb3["group_size"] or ours.get("num_generations", arguments.SURFACE_DEFAULTS["num_generations"])
        per_group = G * self.horizon + 1 if alt else None
        surface = {"seed": self.seed, "max_episode_steps": self._max_episode_steps, "group_mode": self.group_mode,
                   "horizon": self.horizon, "every_action": alt and self._sb3["group_size"] is None
                   and "num_generations" not in self._ours}
        if self.exploration_bonus is not None:
            surface["exploration_bonus"] = self.exploration_bonus
        self.config: EnvJob = arguments.build_config(self._sb3, ours, source.n_envs if source else 1,
                                                     limit, per_group, _env_id(source), surface)

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
                            obs_transform=ObsNormalizer(source.normalizer) if _norm_obs(source) else None,
                            max_episode_steps=self._episode_limit(source))

    def set_env(self, env: Any, force_reset: bool = True) -> None:
        """Train on ``env`` from now on: the same spaces and number of envs as the model's (SB3's
        checks); ``force_reset=False`` keeps the last observation (SB3's ``_last_obs``)."""
        source = env if isinstance(env, EnvSource) else resolve_env(env)
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
        while go_on and self.num_timesteps < total and not self._run.done:  # done: no step fits what is left
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
        cut = self._budget_cut(sampler)
        for r, n, was_cut in zip(sampler.last_episode_returns, sampler.last_episode_lengths, cut):
            if not was_cut:
                self.ep_info_buffer.append({"r": float(r), "l": int(n), "t": round(time.perf_counter(), 6)})
        for env in getattr(sampler, "env_list", ()):
            if isinstance(env, CodecWrapper):
                self.ep_success_buffer.extend(env.successes)
                env.successes.clear()
        batch = sampler.last_batch
        if batch is not None and self._source.codec is not None and batch.context.dim() == 3:
            self._last_obs = self._source.codec.decode_obs(batch.context[:, -1].numpy())[: self.n_envs]
        return metrics, new

    @staticmethod
    def _budget_cut(sampler: Any) -> list[bool]:
        """Per episode of the last rollout: cut short by learn's budget rather than ended (SB3 would
        go on with it)."""
        return list(sampler.last_episode_cut)

    def _replay_steps(self, cb: Any, new: int) -> bool:
        """SB3's ``on_step`` calls for ``new`` env steps, each after ``update_locals`` with the
        locals SB3's callbacks read (:func:`grpo_seq.sb3.callbacks.rollout_locals`); False stops."""
        n_envs, end = self._source.n_envs, self.num_timesteps + new
        steps = self._rollout_locals(new)
        go_on = True
        while go_on and self.num_timesteps + n_envs <= end:
            self.num_timesteps += n_envs
            loc = next(steps, None) if steps is not None else None
            if loc is not None:
                cb.update_locals(loc)
            go_on = bool(cb.on_step())
        return go_on

    def _rollout_locals(self, new: int) -> Any:
        sampler = self._trainer.sampler
        batch = sampler.last_batch
        if batch is None or self.group_mode != "episodes" or int(batch.mask.sum()) != new:
            return None
        mask = batch.mask.numpy().copy()
        cut = self._budget_cut(sampler)
        returns = [float("nan") if c else r for r, c in zip(sampler.last_episode_returns, cut)]
        return rollout_locals(batch.context.numpy(), mask, batch.step_rewards.numpy(), batch.tokens.numpy(),
                              self.n_envs, self._source.codec, returns, cut)

    def _progress_bar(self, show: bool, total: int) -> Any:
        if not show:
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, unit="step")

    def _dump_logs(self, m: dict[str, float], iteration: int, start: int, t0: float) -> None:
        elapsed = max(time.perf_counter() - t0, 1e-9)
        rec = self.logger.record
        if self.ep_info_buffer:
            rec("rollout/ep_rew_mean", float(np.mean([e["r"] for e in self.ep_info_buffer])))
            rec("rollout/ep_len_mean", float(np.mean([e["l"] for e in self.ep_info_buffer])))
        if self.ep_success_buffer:
            rec("rollout/success_rate", float(np.mean(self.ep_success_buffer)))
        if self.reward_function is not None or self.group_mode == "alternatives":
            rec("rollout/train_reward_mean", m["reward/mean"])
        rec("time/iterations", iteration)
        rec("time/fps", int((self.num_timesteps - start) / elapsed))
        rec("time/time_elapsed", int(elapsed))
        rec("time/total_timesteps", self.num_timesteps)
        for ours, theirs in (("loss/policy", "loss"), ("policy/entropy", "entropy"), ("policy/clip_fraction",
                             "clip_fraction"), ("perf/lr", "learning_rate"), ("loss/grad_norm", "grad_norm"),
                             ("reward/zero_std_groups", "zero_std_groups")):
            if m[ours] == m[ours]:  # NaN: no token was scored for it this update (nothing to show)
                rec(f"train/{theirs}", float(m[ours]))
        rec("train/n_updates", self._trainer.step_count * self.config.mu)  # passes over a rollout, as PPO counts
        self.logger.dump(self.num_timesteps)

    # -- acting ------------------------------------------------------------------------------------

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, Any]:
        """``(action, state)`` as SB3 returns them: one observation gives one action (shaped as the
        action space), a batch ``(n, ...)`` gives ``n``; ``state`` is passed back (no recurrence)."""
        if isinstance(self.policy, GRPOPolicy):
            return self.policy.predict(observation, state, episode_start, deterministic)
        obs = np.asarray(observation, dtype=np.float32)
        dim = int(self.policy.init_kwargs["obs_dim"]) if hasattr(self.policy, "init_kwargs") else obs.shape[-1]
        if obs.shape == (dim,):
            return np.asarray(self._actor(deterministic)(obs[None])[0], dtype=np.int64), state
        if obs.ndim == 2 and obs.shape[1] == dim:
            return np.asarray(self._actor(deterministic)(obs), dtype=np.int64), state
        raise UsageError(f"GRPO.predict: an observation shaped ({dim},) or a batch (n, {dim}), got {obs.shape}")

    def _actor(self, greedy: bool) -> Any:
        """The numpy actor of the current weights, built once per update (greedy or sampling)."""
        if greedy not in self._actors:
            rng = np.random.default_rng(self.seed + 7 + len(self._actors))
            self._actors[greedy] = make_actor(self.policy, rng, greedy=greedy)
        return self._actors[greedy]



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


def _recommend_cpu(device: torch.device, policy: Any) -> None:
    """SB3's warning for an MLP policy on a GPU: rollouts act through a numpy copy of the weights
    either way, so only the update runs there, in kernels too small to fill it."""
    if device.type == "cuda" and policy == "MlpPolicy":
        warnings.warn("You are trying to run GRPO on the GPU with an MlpPolicy; it is meant to run on the CPU. "
                      "Pass device='cpu' (or export CUDA_VISIBLE_DEVICES=) to use the CPU. The model will train, "
                      "but the GPU will be mostly idle and training may take longer than on the CPU.", UserWarning,
                      stacklevel=3)


def _env_id(source: EnvSource | None) -> str | None:
    """The registered id of the user's env, where it has one."""
    if source is None:
        return None
    spec = source.env.spec
    return source.env_id or (spec.id if spec is not None else None)
