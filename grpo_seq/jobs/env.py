"""Run an env agent's job (:class:`grpo_seq.jobs.env_spec.EnvJob`): an episode's actions are the
"completion", and the G episodes of a group share their start state.

:class:`EnvRun` is one run's parts (policy, sampler, trainer, evaluator) and the state its loop
carries; :func:`run_env_job` takes it from its first step to its summary. The command line, the
Stable-Baselines3 class and the spec files all build their runs here.

Where this departs from the paper (DeepSeekMath section 4.1), and why:
- beta = 0, so no reference model: the reference would be the random initial policy.
- Per-step advantages: each step's return-to-go is normalised against the group members still
  running at the same step. The paper's process supervision normalises step rewards over the
  whole group and is identically 0 where every step pays the same.
- The loss is a token mean (``bnpo``): a long episode weighs by its steps, not as one output.
- Adam with momentum 0.5 (beta2 0.95): consecutive batches start from different states and
  disagree; momentum 0.9 keeps pushing one batch's direction for about 10 updates.

Writes <output_dir>/{config.json (the spec), metrics.jsonl, summary.json, policy/, policy_best/,
checkpoints/}. SIGTERM or Ctrl-C finishes the current step, writes a checkpoint and prints the
command that resumes it; the resumed run repeats the uninterrupted one exactly.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn

from ..envs.defaults import image_defaults, per_env
from ..envs.obs_scale import default_obs_scale, rollout_obs_units
from ..errors import ConfigError, require
from ..scoring.evaluation import PolicyEvaluator, eval_stream_seed
from ..io.plot import plot_run_if_possible
from ..policies.actor import make_actor
from ..policies.image_torso import is_image_shape
from ..policies.mlp import CategoricalMLPPolicy
from ..io.record import check_renderer, record_episode
from ..sampling.alternatives import AlternativesSampler
from ..sampling.base import Budgeted, EpisodeSampler, ObsTransform
from ..sampling.env import EnvGroupSampler, action_nvec, env_spec, is_registered, make_env
from ..sampling.env_wrappers import load_wrappers
from ..sampling.novelty import NoveltyBonus
from ..sampling.snapshot import env_name
from ..sampling.spaces import dict_parts
from ..io.serialization import atomic_write_text
from ..loop.stopping import GracefulStop, checkpoint_on_error
from ..io.tracking import tracker_kwargs
from ..loop.trainer import GRPOLoop
from .budget import record_frames, shrink
from .callbacks import JobCallbacks, Progress, as_callbacks
from .env_spec import EnvJob
from .folder import resolve_run_dir
from .obs_norm import ObsNorm, saved_moments

__all__ = ["EnvRun", "EnvLoopState", "run_env_job", "make_policy", "make_sampler", "solved_threshold", "load_actor",
           "check_spaces", "env_form", "env_wrappers", "eval_greedy", "env_codec", "policy_action_bins",
           # what a door builds its envs and acts with, as the job does
           "make_env", "env_name", "make_actor", "is_registered"]


def env_codec(env_id: str, action_bins: int | None = None, action_clip: Any = None) -> Any:
    """How ``env_id``'s actions are tokens (:class:`~grpo_seq.sampling.spaces.SpaceCodec`), or None
    where its tokens are its actions (``Discrete`` from 0)."""
    env = make_env(env_id, action_bins=action_bins, action_clip=tuple(action_clip) if action_clip else None)
    try:
        return getattr(env, "codec", None)
    finally:
        env.close()


def policy_action_bins(policy: Any) -> int | None:
    """The values per dimension a saved policy's continuous action was cut into (its factorised
    head's size per dimension; ignored for a discrete env's own dimensions)."""
    nvec = getattr(policy, "action_nvec", None)
    return int(nvec[0]) if nvec else None


def env_form(spec: EnvJob) -> dict[str, Any]:
    """``spec.env_wrappers``, ``spec.action_bins`` and ``spec.action_clip`` as :func:`make_env`'s
    keywords: what the policy sees of the env and how a continuous action becomes tokens, the same
    in training, evaluation and acting."""
    return {"action_bins": spec.action_bins, "action_clip": tuple(spec.action_clip) if spec.action_clip else None,
            "wrappers": load_wrappers(spec.env_wrappers or [])}


def env_wrappers(env_id: str, paths: Sequence[str] | None = None) -> list[Any]:
    """The wrappers ``paths`` name, loaded (None: the env family's, :mod:`grpo_seq.envs.defaults`)."""
    return load_wrappers(per_env(env_id).get("env_wrappers", []) if paths is None else paths)


def eval_greedy(env_id: str, given: bool | None = None) -> bool:
    """Whether ``env_id``'s evaluations take the likeliest action: ``given``, else its family's."""
    return per_env(env_id)["eval_greedy"] if given is None else given


def solved_threshold(spec: EnvJob) -> float | None:
    """``spec.solved_return``, else the env spec's ``reward_threshold``; None where the env has
    none (Pendulum, MinAtar): the run is never "solved" and trains its whole budget."""
    if spec.solved_return is not None:
        return spec.solved_return
    threshold = env_spec(spec.env_id).reward_threshold
    return None if threshold is None else float(threshold)


def make_policy(spec: EnvJob) -> CategoricalMLPPolicy:
    """The MLP policy; ``spec.obs_scale`` empty means CartPole's thresholds or, for another env,
    what random play seeded with ``spec.seed`` reaches (:func:`rollout_obs_units`: centred on it
    with ``spec.obs_center``). Image observations (a Box of 3 dimensions) get a convolutional
    torso before the hidden layers, their pixels scaled as Stable-Baselines3's ``CnnPolicy``
    scales them, and no per-dimension units; so do the image parts of a Dict observation (SB3's
    ``MultiInputPolicy``)."""
    env = make_env(spec.env_id, **env_form(spec))
    try:
        obs_dim, num_actions = env.observation_space.shape[0], int(env.action_space.n)
        head = dict(action_nvec=action_nvec(env), **action_head(spec, env))
        native = getattr(getattr(env, "codec", None), "obs_space", env.observation_space)
        if isinstance(native, gym.spaces.Box) and is_image_shape(native.shape):
            return CategoricalMLPPolicy(obs_dim, num_actions, tuple(spec.hidden_sizes),
                                        orthogonal_init=spec.orthogonal_init, **head,
                                        image_shape=native.shape, image_scale=255.0 if native.dtype == np.uint8 else 1.0)
        parts = dict_parts(native)
        if parts:  # a Dict holding images: a torso per image, the other parts as they are
            return CategoricalMLPPolicy(obs_dim, num_actions, tuple(spec.hidden_sizes),
                                        orthogonal_init=spec.orthogonal_init, **head, obs_parts=parts)
        shift, scale = None, spec.obs_scale or (None if spec.obs_center else default_obs_scale(env))
        if spec.obs_center or not scale:
            shift, rolled = rollout_obs_units(env, spec.obs_center, seed=spec.seed)
            scale = scale or rolled
    finally:
        env.close()
    if len(scale) != obs_dim:
        raise ConfigError(f"--obs_scale has {len(scale)} numbers; {spec.env_id} observations have {obs_dim} "
                          "dimensions (give one divisor per dimension)")
    return CategoricalMLPPolicy(obs_dim, num_actions, tuple(spec.hidden_sizes), obs_scale=scale,
                                orthogonal_init=spec.orthogonal_init, obs_shift=shift, **head)


def take_image_defaults(spec: EnvJob, policy: nn.Module) -> None:
    """A policy over images (one convolutional torso): the options ``spec`` left to its env's family
    take :func:`grpo_seq.envs.defaults.image_defaults` instead, as Stable-Baselines3's ``CnnPolicy``
    does through the ``GRPO`` door. Known only now: the env's observations are seen once it is made."""
    if "image_shape" not in getattr(policy, "init_kwargs", {}):
        return
    for name, value in {**image_defaults(spec.env_id), "obs_norm": False}.items():  # pixels have their own scale
        if name in getattr(spec, "family_filled", ()) and (name != "minibatch_tokens" or spec.takes_step_minibatches()):
            setattr(spec, name, value)


def action_head(spec: EnvJob, env: Any) -> dict[str, Any]:
    """The policy's head options: ``spec.action_head`` for a continuous action (a Gaussian is refused
    for any other, naming the env's action space); the categorical head otherwise."""
    codec = getattr(env, "codec", None)
    continuous = codec is not None and codec.action_values is not None
    space = getattr(codec, "act_space", env.action_space)
    for name in ("action_bins", "action_clip"):  # they shape a Box action's values; any other has none
        require(spec, name, continuous or getattr(spec, name) is None,
                f"cuts a continuous (Box) action into values; {spec.env_id}'s actions are {space}")
    require(spec, "log_std_init", spec.action_head == "gaussian" or spec.log_std_init == 0.0,  # 0.0: every family's
            "the Gaussian head's starting log std; this run's head is categorical (add --action_head gaussian)")
    if spec.action_head == "categorical":
        return {}
    require(spec, "action_head", continuous, f"gaussian weighs the values of a continuous (Box) action; "
            f"{spec.env_id}'s actions are {space}")
    return {"action_head": spec.action_head, "log_std_init": spec.log_std_init}


def load_actor(path: str | Path, greedy: bool = True) -> tuple[int, Callable[[Any], Any]]:
    """A saved env policy (a run's ``policy/``) as ``(obs_dim, act)``: ``act(obs)`` gives the
    actions of a batch of observations from a numpy copy of the weights (no torch per call)."""
    from ..io.serialization import load_policy

    policy = load_policy(str(path))
    return int(policy.init_kwargs["obs_dim"]), make_actor(policy, greedy=greedy)


def check_spaces(env: Any, name: str) -> None:
    """Refuse (:class:`UsageError`, naming the space) an env whose observations or actions have no
    token form: continuous or composite actions (:func:`grpo_seq.sampling.env.as_tokens`)."""
    from ..sampling.env import as_tokens

    as_tokens(env, name)


def check_budget(spec: EnvJob, episodes: int) -> None:
    """Refuse a budget smaller than one step: a step plays ``episodes`` episodes of at least one env
    step each, and a run never takes more env steps than its budget."""
    require(spec, "total_env_steps", spec.total_env_steps >= episodes,
            f"must hold at least one step, which plays {episodes} episodes of at least one env step each "
            "(num_groups x num_generations, times the processes)")


def make_sampler(spec: EnvJob, process_index: int, obs_scale: list[float] | None,
                 env_fn: Callable[[], Any] | None = None, reward_fn: Any = None, *,
                 env_objects: list[Any] | None = None, obs_transform: ObsTransform | None = None,
                 max_episode_steps: int | None = None) -> EpisodeSampler:
    """The sampler of ``spec.group_mode``: groups of episodes (:class:`EnvGroupSampler`) or of
    actions tried at one state (:class:`AlternativesSampler`). Each process samples its own whole
    groups, seeded apart; with ``exploration_bonus`` (and observation units to count visits in) the
    processes count visits separately.

    What no spec can name: ``env_fn`` builds the env where ``spec.env_id`` is not registered (or
    carries the caller's wrappers); ``env_objects``, the caller's own envs, stepped in place;
    ``reward_fn`` replaces the env's reward; ``obs_transform``, what the policy sees of an
    observation (a running normalisation); ``max_episode_steps``, the episodes' cap where the env
    has no time limit and the spec names none."""
    seed = spec.seed + 1_000_003 * process_index
    form = env_form(spec)  # the wrappers imported once, not at every env made
    limit = spec.max_episode_steps or max_episode_steps
    if spec.group_mode == "alternatives":
        make = env_fn or (lambda: make_env(spec.env_id, **form,
                                           **({"max_episode_steps": limit} if limit else {})))
        return AlternativesSampler(make, spec.num_groups, None if spec.every_action else spec.num_generations,
                                   horizon=spec.horizon, gamma=spec.gamma, seed=seed, reward_fn=reward_fn)
    bonus = NoveltyBonus(spec.exploration_bonus, obs_scale, spec.bonus_bins) if spec.exploration_bonus > 0 else None
    if env_fn is None and not env_objects and any(form.values()):
        env_fn = lambda: make_env(spec.env_id, **form)  # noqa: E731  (wrappers, a continuous action's bins)
    return EnvGroupSampler(spec.env_id, spec.num_groups, spec.num_generations, seed=seed, max_episode_steps=limit,
                           env_fn=env_fn, reward_fn=reward_fn, bonus=bonus, branch_prob=spec.branch_prob,
                           env_objects=env_objects, obs_transform=obs_transform)


@dataclass
class EnvLoopState:
    """What the loop carries besides the trainer, checkpointed with it so that a resumed run
    repeats an uninterrupted one."""

    eval_seconds: float = 0.0
    solved_at: dict | None = None  # env_steps, seconds, train_seconds, iteration of the first solve
    last_eval: float | None = None
    evals_after_solved: int = 0
    best: dict | None = None  # the best evaluation so far: return, env_steps
    next_eval: int = 0
    eval_seed: int = 0
    elapsed: float = 0.0
    obs_moments: dict | None = None  # --obs_norm: the running moments the policy's units follow


class EnvRun:
    """One env run's parts, built from its spec. A door may hand in what no spec can name: a
    ``policy`` of its own, a ``sampler`` (another sampling mode), an ``env_fn`` for an env
    without a registered id, a step ``reward_fn``, an ``accelerator``.

    Seeds the global python, numpy and torch RNGs with ``spec.seed`` before the policy's weights
    are drawn (Stable-Baselines3 does the same with a seed)."""

    label = "env"

    def __init__(self, spec: EnvJob, policy: nn.Module | None = None, sampler: EpisodeSampler | None = None,
                 env_fn: Callable[[], Any] | None = None, reward_fn: Any = None,
                 accelerator: Accelerator | None = None, make_optimizer: Callable[[list], Any] | None = None):
        self.spec = spec
        self.quick = shrink(spec)  # GRPO_SEQ_QUICK: a smoke test's budget (the line to say, else None)
        set_seed(spec.seed)  # python, numpy and torch: the policy's initial weights depend on the seed
        self.accelerator = accelerator or Accelerator(cpu=spec.use_cpu, **tracker_kwargs(spec.report_to, spec.output_dir))
        self.label = spec.env_id or "env"
        if spec.record and self.is_main_process:  # fail now, not after training, when the renderer is missing
            check_renderer(spec.env_id)
        # The policy first (its observation scale sizes the bonus's cells); parameters start equal everywhere.
        if policy is None:
            policy = make_policy(spec)
            take_image_defaults(spec, policy)
        if spec.eval_every:
            spec.solved_return = solved_threshold(spec)
        obs_scale = getattr(policy, "init_kwargs", {}).get("obs_scale")
        sampler = sampler or make_sampler(spec, self.accelerator.process_index, obs_scale, env_fn, reward_fn)
        check_budget(spec, sampler.num_envs * self.accelerator.num_processes)
        self.obs_norm = ObsNorm(policy, self.accelerator) if spec.obs_norm else None
        if self.obs_norm is not None and spec.resume_from:  # the units the checkpoint's weights were trained in
            self.obs_norm.load_state_dict(saved_moments(spec.resume_from))
        self.trainer = GRPOLoop(spec, policy, sampler, self.accelerator, make_optimizer=make_optimizer)
        # Same eval seeds on every process: equal parameters give equal returns, so all agree.
        self.evaluate = PolicyEvaluator(spec.env_id, spec.eval_episodes, seed=eval_stream_seed(spec.seed),
                                        env_kwargs=self._env_kwargs(), greedy=spec.eval_greedy,
                                        **env_form(spec)) if spec.eval_every else None
        self.state = EnvLoopState(next_eval=spec.eval_every, eval_seed=eval_stream_seed(spec.seed))
        if spec.resume_from:
            self.state = EnvLoopState(**{**dataclasses.asdict(self.state), **self.trainer.resume(spec.resume_from)})
        if self.evaluate is not None:
            self.evaluate.seed = self.state.eval_seed
        self._start = time.perf_counter() - self.state.elapsed
        self.last_metrics: dict[str, float] = {}
        self.say: Callable[[str], None] = lambda text: None  # where the run's lines go (run_env_job: the callbacks)

    def _env_kwargs(self) -> dict[str, Any] | None:
        return {"max_episode_steps": self.spec.max_episode_steps} if self.spec.max_episode_steps else None

    @property
    def is_main_process(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def done(self) -> bool:
        spec, state = self.spec, self.state
        return self.budget_left < self.step_cost or bool(
            spec.stop_after_solved and state.solved_at and state.evals_after_solved >= spec.stop_after_solved)

    def replace_sampler(self, sampler: EpisodeSampler) -> None:
        """Go on sampling from ``sampler`` (new envs for the same policy: Stable-Baselines3's
        ``set_env``); the old one is closed."""
        self.trainer.sampler.close()
        self.trainer.sampler = sampler

    @property
    def env_steps(self) -> int:
        """Env steps taken so far, all processes: one token per env step of an episode, except in
        group_mode alternatives, whose tries step their env ``horizon`` times for one token."""
        if self.spec.group_mode == "alternatives":
            return self.trainer.sampler.env_steps * self.accelerator.num_processes
        return self.trainer.tokens_sampled

    @property
    def budget_left(self) -> int:
        return self.spec.total_env_steps - self.env_steps

    @property
    def episodes_per_step(self) -> int:
        """Episodes one step plays over all processes: the least env steps a step can take."""
        return self.trainer.sampler.num_envs * self.accelerator.num_processes

    @property
    def step_cost(self) -> int:
        """The env steps the budget must still hold for another step: episodes are cut to what is
        left, so one env step each; alternatives' tries are not, so the most a step can take (each
        try ``horizon`` steps, and one step on to the next state, per group)."""
        if self.spec.group_mode == "alternatives":
            sampler = self.trainer.sampler
            per_group = sampler.num_generations * self.spec.horizon + 1
            return sampler.num_groups * per_group * self.accelerator.num_processes
        return self.episodes_per_step

    def loop_state(self) -> dict[str, Any]:
        """The loop's state as saved in a checkpoint."""
        self.state.elapsed = time.perf_counter() - self._start
        if self.evaluate is not None:
            self.state.eval_seed = self.evaluate.seed
        if self.obs_norm is not None:
            self.state.obs_moments = self.obs_norm.state_dict()
        return dataclasses.asdict(self.state)

    def progress(self) -> Progress:
        m, last = self.last_metrics, self.state.last_eval
        shown = {"ret": f"{m.get('reward/env_return', 0):.0f}", "eval": f"{last if last is not None else 0:.0f}"}
        if m.get("reward/flat_steps_in_a_row", 0) >= self.trainer.signal.patience:
            shown["signal"] = "NONE"
        return Progress(min(self.env_steps, self.spec.total_env_steps), self.spec.total_env_steps, "step", shown)

    def step(self, progress: float | None = None, learning_rate: float | None = None,
             epsilon: float | None = None) -> tuple[dict[str, float], dict[str, Any] | None]:
        """One training step (``progress`` drives the learning-rate schedule; default: the share of
        the budget done; ``learning_rate`` and ``epsilon``: this step's, where the caller follows
        schedules of its own), then an evaluation when one is due. Returns the step's metrics and
        the evaluation's result (None when none ran)."""
        spec, trainer = self.spec, self.trainer
        if isinstance(trainer.sampler, Budgeted):  # each process its share of what is left
            trainer.sampler.step_budget = self.budget_left // self.accelerator.num_processes
        m = trainer.step(progress=self.env_steps / spec.total_env_steps if progress is None else progress,
                         learning_rate=learning_rate, epsilon=epsilon)
        self.last_metrics = m
        if self.obs_norm is not None:
            self.obs_norm.observe(trainer.last_batch)
        due = self.env_steps >= self.state.next_eval or self.done
        return m, self._evaluate() if self.evaluate is not None and due else None

    def _evaluate(self) -> dict[str, Any]:
        """Greedy episodes; logs them, keeps the best policy, notes the first solve."""
        spec, trainer, state = self.spec, self.trainer, self.state
        state.next_eval = (self.env_steps // spec.eval_every + 1) * spec.eval_every
        t_eval = time.perf_counter()
        state.last_eval = float(self.evaluate(trainer.policy).mean())
        state.eval_seconds += time.perf_counter() - t_eval
        elapsed = time.perf_counter() - self._start
        trainer.log({"step": trainer.step_count, "perf/tokens_total": trainer.tokens_sampled, "eval/return": state.last_eval,
                     "eval/seed": self.evaluate.last_seed, "perf/wall_seconds": elapsed})
        if state.best is None or state.last_eval > state.best["return"]:
            state.best = {"return": state.last_eval, "env_steps": self.env_steps}
            if spec.keep_best and trainer.output_dir is not None:
                trainer.save(Path(spec.output_dir, "policy_best"))
        if state.solved_at is not None:
            state.evals_after_solved += 1
        elif spec.solved_return is not None and state.last_eval >= spec.solved_return:
            state.solved_at = {"env_steps": self.env_steps, "seconds": elapsed,
                               "train_seconds": elapsed - state.eval_seconds, "iteration": trainer.step_count}
        return {"env_steps": self.env_steps, "return": state.last_eval, "solved": state.solved_at is not None}

    def finish(self) -> dict[str, Any]:
        """Checkpoint, save the policy (and record an episode), write and say the summary."""
        spec, trainer, out = self.spec, self.trainer, Path(self.spec.output_dir)
        seconds = time.perf_counter() - self._start
        trainer.save_checkpoint(self.loop_state)
        trainer.save()
        video = None
        if spec.record and self.is_main_process:
            video = record_episode(trainer.policy, spec.env_id, out / "agent.gif", seed=eval_stream_seed(spec.seed),
                                   max_steps=record_frames())
            self.say(f"greedy episode: {video['frames']} steps, return {video['return']:.0f}: {video['gif']}"
                     + (f" and {video['mp4']}" if video["mp4"] else ""))
        summary = self.summary(seconds, video)
        if self.is_main_process:
            atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
            self.say(json.dumps(summary))
            curves = plot_run_if_possible(out, out / "curves.png", x="env_steps", warn=self.say)
            if curves:
                self.say(f"learning curves: {curves}")
        trainer.close()
        return summary

    def summary(self, seconds: float, video: dict | None = None) -> dict[str, Any]:
        """What the run did: solved or not and when, its evaluations, its cost."""
        spec, trainer, state = self.spec, self.trainer, self.state
        solved, best = state.solved_at, state.best
        return {
            "env_id": spec.env_id,
            "seed": spec.seed,
            "solved": solved is not None,
            "solved_env_steps": solved["env_steps"] if solved else None,
            "solved_seconds": solved["seconds"] if solved else None,
            "solved_train_seconds": solved["train_seconds"] if solved else None,
            "final_eval_return": state.last_eval,
            "best_eval_return": best["return"] if best else None,
            "best_eval_env_steps": best["env_steps"] if best else None,
            "best_policy": self._best_policy_dir(),
            "no_signal": trainer.signal.message,  # the no-learning-signal warning, if the run ever gave it
            "env_steps": self.env_steps,
            "iterations": trainer.step_count,
            "seconds": seconds,
            "eval_seconds": state.eval_seconds,
            "num_processes": self.accelerator.num_processes,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,  # this process's peak
            "record": video,
        }

    def _best_policy_dir(self) -> str | None:
        """This run folder's ``policy_best/`` when it holds one: a fork of another run's checkpoint
        (``--resume_from A --output_dir B``) that never beat A's best evaluation saved none, and
        gets None rather than a path that does not exist."""
        spec = self.spec
        folder = Path(spec.output_dir, "policy_best") if spec.output_dir else None
        found = self.state.best and spec.keep_best and folder is not None and folder.is_dir()
        return str(folder) if found else None


def run_env_job(spec: EnvJob, callbacks: JobCallbacks | list[JobCallbacks] | None = None, **parts: Any) -> dict[str, Any]:
    """Train, evaluate and save one env run; returns its summary.

    ``callbacks`` hear the run (:class:`JobCallbacks`); ``parts`` go to :class:`EnvRun`.
    Changes the whole process, as a program does: seeds the global RNGs, sets torch's thread
    count, and turns SIGTERM and SIGINT into "checkpoint, then exit" while it runs."""
    cbs = as_callbacks(callbacks)
    try:
        spec.output_dir = resolve_run_dir(spec, f"runs/{spec.env_id}__{spec.seed}__{int(time.time())}")
        cbs.on_run_dir(Path(spec.output_dir))
        torch.set_num_threads(spec.torch_threads)
        run = EnvRun(spec, **parts)
        run.say = lambda text: cbs.on_message(run, text)
        cbs.on_start(run)
        if run.quick:
            run.say(run.quick)
        if run.trainer.resumed_from is not None:
            run.say(f"resumed from {run.trainer.resumed_from}: step {run.trainer.step_count}, {run.env_steps} env steps")
        _train(run, cbs)
        summary = run.finish()
        cbs.on_end(run, summary)
        return summary
    finally:
        cbs.close()


def _train(run: EnvRun, cbs: JobCallbacks) -> None:
    """Step until the budget is spent, the run is solved enough, a callback stops it or a signal comes."""
    trainer, warned = run.trainer, False  # the no-learning-signal warning is said once
    with GracefulStop() as stop, checkpoint_on_error(trainer, run.loop_state, run.spec.output_dir):
        while not run.done:
            metrics, evaluation = run.step()
            if trainer.signal.message and not warned:
                cbs.on_message(run, f"warning: {trainer.signal.message}")
                warned = True
            if evaluation is not None:
                cbs.on_eval(run, evaluation)
                cbs.on_message(run, f"env steps {evaluation['env_steps']}: eval return {evaluation['return']:.1f}")
            stop_asked = cbs.on_step(run, metrics)
            path = trainer.maybe_save_checkpoint(run.loop_state)
            if path is not None:
                cbs.on_checkpoint(run, path)
            if stop.agreed(run.accelerator):
                cbs.close()
                stop.checkpoint_and_exit(trainer, run.loop_state, run.spec.output_dir)
            if stop_asked:
                break
