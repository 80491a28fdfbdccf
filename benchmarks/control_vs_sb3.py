"""The classic control suite: grpo-seq's env recipe against Stable-Baselines3 PPO with rl-zoo3's
tuned hyper-parameters, read from the installed rl_zoo3 package (``hyperparams/ppo.yml``).

    python benchmarks/control_vs_sb3.py --envs CartPole-v1 Acrobot-v1 MountainCar-v0 LunarLander-v3 --seeds 0 1 2 3 4
    python benchmarks/control_vs_sb3.py --envs Pendulum-v1 MountainCarContinuous-v0 --seeds 2000 2001 2002 2003 2004 \
        --stop_after 0 --out benchmarks/results/workloads_vs_sb3/result.json

Needs the ``bench`` and ``control`` extras (``pip install -e ".[bench,control]"``: stable-baselines3,
matplotlib, rl_zoo3, box2d).

What runs, per env and seed, alternating which system goes first from seed to seed so that
machine drift hits both alike, each in its own subprocess (so peak memory belongs to one run):
- ours: ``python recipes/gym_env.py --env_id E --seed S`` with the recipe's defaults for E;
- SB3: PPO("MlpPolicy") with rl-zoo3's settings for E (``n_envs``, ``normalize`` as
  ``VecNormalize``, ``lin_`` schedules, ``policy_kwargs``, gSDE where it says ``use_sde``), its
  budget ``n_timesteps``, one torch thread. rl-zoo3 tunes MuJoCo's v4 envs; a v5 env takes them.
  MinAtar has no rl-zoo3 entry: its Atari one on our MinAtar torso, with our episode cap and budget
  (``minatar_settings``); MinAtar registers no threshold, so its runs give their returns only.
A continuous action is ours cut into bins (its defaults' ``action_bins``) and SB3's Gaussian
policy's own: SB3 is evaluated on the env's actions (its mean action, clipped to the bounds, as its
``predict`` gives), ours on the bins' values. An env without a ``reward_threshold`` takes
``THRESHOLDS``'s. rl-zoo3's ``env_wrapper`` (MiniGrid's ``FlatObsWrapper``) wraps PPO's envs; ours
take the same wrapper from their family's defaults (MiniGrid needs the extra ``minigrid``).
Both are evaluated the same way: ``--eval_every`` env steps, 10 episodes of
``grpo_seq.scoring.evaluation.PolicyEvaluator``, greedy (sampled and seeded where the env's family
evaluates so: MiniGrid), SB3's policy through an adapter that applies its ``VecNormalize``
observation statistics, reset seeds from ``eval_stream_seed(seed)`` on (each
evaluation new start states, each run seed its own). "Solved" is the first
evaluation at or above the env's ``reward_threshold``; each run stops ``--stop_after`` evaluations
after it (0: runs its whole budget), so "final return" is the last evaluation's. Wall seconds count
from just before training and include the evaluations.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import record  # benchmarks/record.py: default --out and the meta block
from cartpole_vs_sb3 import SB3Actor, fmt, inf_if_none, jsonable, linear_schedule, ratio

ROOT = Path(__file__).resolve().parents[1]
ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3")
EVAL_EVERY = {"CartPole-v1": 1_000, "Acrobot-v1": 5_000, "MountainCar-v0": 10_000, "LunarLander-v3": 20_000,
              "Pendulum-v1": 5_000, "MountainCarContinuous-v0": 5_000, "LunarLanderContinuous-v3": 20_000,
              "HalfCheetah-v5": 20_000, "Hopper-v5": 20_000, "MiniGrid-Empty-Random-5x5-v0": 5_000}
# Pendulum registers no threshold: -200 is where its pendulum swings up and stays up from most starts
# (rl-zoo3's PPO ends near -170 on its benchmark page)
# MiniGrid's return is 1 - 0.9 x steps / the step limit on reaching the goal, else 0: 0.9 is the goal
# reached in every episode within a ninth of the limit (Empty-Random-5x5: 11 of 100 steps)
THRESHOLDS = {"Pendulum-v1": -200.0, "MiniGrid-Empty-Random-5x5-v0": 0.9}
SYSTEMS = ("ours", "sb3")
# SB3's budget there is 1M env steps: minutes a run
LONG = ("MountainCar-v0", "LunarLander-v3", "LunarLanderContinuous-v3", "HalfCheetah-v5", "Hopper-v5")


def threshold_of(env_id: str) -> float | None:
    """The env's ``reward_threshold``, else :data:`THRESHOLDS`'s; None for MinAtar (final return only)."""
    import gymnasium as gym

    from grpo_seq.sampling.env_packages import register_namespace

    if env_id.startswith("MinAtar/"):
        return None
    register_namespace(env_id)
    value = gym.spec(env_id).reward_threshold
    if value is None and env_id not in THRESHOLDS:
        raise SystemExit(f"{env_id} has no reward_threshold; add one to THRESHOLDS")
    return float(THRESHOLDS[env_id] if value is None else value)


def zoo_settings(env_id: str) -> dict[str, Any]:
    """rl-zoo3's PPO entry for ``env_id``, from the installed package's ``hyperparams/ppo.yml``."""
    import rl_zoo3
    import yaml

    table = yaml.safe_load(Path(rl_zoo3.__file__).with_name("hyperparams").joinpath("ppo.yml").read_text())
    if env_id.startswith("MinAtar/"):
        return minatar_settings(env_id, table["atari"])
    if env_id not in table and env_id.endswith("-v5") and env_id[:-1] + "4" in table:
        env_id = env_id[:-1] + "4"  # rl-zoo3 tunes MuJoCo's v4; v5 is the same task with fixes
    if env_id not in table:
        raise SystemExit(f"rl_zoo3's ppo.yml has no entry for {env_id}")
    return dict(table[env_id])


def minatar_settings(env_id: str, atari: dict[str, Any]) -> dict[str, Any]:
    """rl-zoo3 has no MinAtar entry: its Atari one, without the ALE wrapper and frame stack that
    MinAtar's frames do not need, on our MinAtar torso (the MinAtar paper's network, which SB3's
    Nature CNN cannot be on 10 x 10 frames), with our family's episode cap and budget."""
    from grpo_seq.envs.defaults import per_env

    ours = per_env(env_id)
    out = {k: v for k, v in atari.items() if k not in ("env_wrapper", "frame_stack")}
    out.update(policy="CnnPolicy", n_timesteps=ours["total_env_steps"], max_episode_steps=ours["max_episode_steps"],
               policy_kwargs=dict(features_extractor_class=image_features()))
    return out


def image_features() -> type:
    """An SB3 features extractor of our :class:`~grpo_seq.policies.image_torso.ImageTorso`."""
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    from grpo_seq.policies.image_torso import ImageTorso

    class ImageFeatures(BaseFeaturesExtractor):
        def __init__(self, observation_space: Any):
            torso = ImageTorso(observation_space.shape)
            super().__init__(observation_space, torso.features)
            self.torso = torso

        def forward(self, obs: Any) -> Any:
            return self.torso(obs.flatten(1))

    return ImageFeatures


def ppo_kwargs(settings: dict[str, Any]) -> dict[str, Any]:
    """PPO keyword arguments from an rl-zoo3 entry: ``lin_<x>`` becomes a linear schedule,
    ``policy_kwargs`` (Python source in the file) is evaluated as rl-zoo3 does, with ``nn`` in scope;
    the entries that are not PPO arguments (env count, budget, normalisation) are left out."""
    from torch import nn

    skip = {"n_envs", "n_timesteps", "policy", "normalize", "env_wrapper", "max_episode_steps"}
    out = {}
    for k, v in settings.items():
        if k in skip:
            continue
        if k == "policy_kwargs" and isinstance(v, str):
            out[k] = eval(v, {"dict": dict, "nn": nn})  # noqa: S307 - rl-zoo3's own file, as rl-zoo3 reads it
            continue
        out[k] = linear_schedule(float(v[4:])) if isinstance(v, str) and v.startswith("lin_") else v
    return out


class NativeEvaluator:
    """``PolicyEvaluator``'s episodes (its seed stream, each env's first episode) on the env's own
    actions: ``act(obs)`` gives them, clipped to a ``Box``'s bounds."""

    def __init__(self, env_id: str, num_episodes: int, seed: int):
        import gymnasium as gym

        self.envs = gym.make_vec(env_id, num_envs=num_episodes, vectorization_mode="sync")
        self.num_episodes, self.seed = num_episodes, seed
        self.max_steps = gym.spec(env_id).max_episode_steps or 100_000

    def __call__(self, act: Any) -> Any:
        import numpy as np

        seed, self.seed = self.seed, self.seed + self.num_episodes
        obs, _ = self.envs.reset(seed=seed)
        space = self.envs.single_action_space
        returns, alive = np.zeros(self.num_episodes), np.ones(self.num_episodes, dtype=bool)
        for _ in range(self.max_steps):
            obs, reward, terminated, truncated, _ = self.envs.step(np.clip(act(obs), space.low, space.high))
            returns += np.where(alive, reward, 0.0)
            alive &= ~(terminated | truncated)
            if not alive.any():
                break
        return returns


class BinnedActions(gym.ActionWrapper):
    """A ``Box`` action as one of ``bins`` evenly spaced values per dimension, from its low to its high
    bound (``MultiDiscrete``), as our policies cut it (``grpo_seq.sampling.spaces.box_action_values``)."""

    def __init__(self, env: gym.Env, bins: int):
        from grpo_seq.sampling.spaces import box_action_values

        super().__init__(env)
        self.values = box_action_values(env.action_space, bins)
        self.action_space = gym.spaces.MultiDiscrete([bins] * self.values.shape[0])

    def action(self, action: Any) -> np.ndarray:
        return bin_values(self.values, action).astype(self.env.action_space.dtype)


def bin_values(values: np.ndarray, action: Any) -> np.ndarray:
    """Bin indices (one action, or one row per env) as the values of ``values``' ``(dims, bins)``."""
    a = np.asarray(action)
    rows = a.reshape(-1, values.shape[0])
    return values[np.arange(values.shape[0])[None, :], rows].reshape(a.shape)


class NormalizedActor(SB3Actor):
    """SB3Actor on observations normalised with VecNormalize's frozen statistics."""

    def __init__(self, policy: Any, venv: Any):
        super().__init__(policy)
        self.venv = venv

    def numpy_actor(self, rng: Any = None, greedy: bool = True):
        inner = super().numpy_actor(rng, greedy)
        return lambda obs: inner(self.venv.normalize_obs(obs).astype("float32"))


def sb3_worker(env_id: str, seed: int, eval_every: int, stop_after: int) -> dict[str, Any]:
    return sb3_train(env_id, seed, eval_every, stop_after)[0]


def sb3_train(env_id: str, seed: int, eval_every: int, stop_after: int, zoo: dict[str, Any] | None = None,
              bins: int | None = None) -> tuple[dict[str, Any], Any]:
    """PPO with rl-zoo3's settings for ``env_id`` (``zoo`` in their place where given), evaluated every
    ``eval_every`` env steps and stopped ``stop_after`` evaluations after solving (0: at the budget):
    the run's record and its greedy actor. ``bins``: a ``Box`` action cut into that many values per
    dimension, PPO's policy a categorical per dimension over them (``BinnedActions``)."""
    import gymnasium as gym
    import resource

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecNormalize

    from grpo_seq.jobs.env import env_wrappers, eval_greedy
    from grpo_seq.sampling.env_packages import register_namespace
    from grpo_seq.scoring.evaluation import PolicyEvaluator, eval_stream_seed

    torch.set_num_threads(1)
    register_namespace(env_id)  # MinAtar's ids exist once minatar has registered them
    zoo = zoo or zoo_settings(env_id)
    threshold = threshold_of(env_id)  # registers MiniGrid's ids, which exist once the package is imported
    wrappers = env_wrappers(env_id, [zoo["env_wrapper"]] if zoo.get("env_wrapper") else [])
    if bins:
        wrappers = [lambda e: BinnedActions(e, bins)]
    limit = {"max_episode_steps": zoo["max_episode_steps"]} if zoo.get("max_episode_steps") else None
    env = make_vec_env(env_id, n_envs=int(zoo.get("n_envs", 1)), seed=seed, env_kwargs=limit,
                       wrapper_class=wrappers[0] if wrappers else None)
    if zoo.get("normalize"):
        env = VecNormalize(env, gamma=zoo.get("gamma", 0.99))
    model = PPO(zoo.get("policy", "MlpPolicy"), env, seed=seed, device="cpu", verbose=0, **ppo_kwargs(zoo))
    model.set_logger(Logger(folder=None, output_formats=[]))
    actor = NormalizedActor(model.policy, env) if zoo.get("normalize") else SB3Actor(model.policy)
    if bins or isinstance(env.action_space, gym.spaces.Box):  # the policy's own actions, as predict gives them
        native, norm = NativeEvaluator(env_id, 10, eval_stream_seed(seed)), getattr(env, "normalize_obs", lambda o: o)
        values = BinnedActions(gym.make(env_id), bins).values if bins else None
        to_env = (lambda a: bin_values(values, a)) if bins else (lambda a: a)  # noqa: E731
        evaluate = lambda _: native(lambda obs: to_env(model.policy.predict(norm(obs), deterministic=True)[0]))  # noqa: E731
    else:
        evaluate = PolicyEvaluator(env_id, 10, seed=eval_stream_seed(seed), env_kwargs=limit, wrappers=wrappers,
                                   greedy=eval_greedy(env_id))  # MiniGrid: sampled, as rl-zoo3 and ours

    class Evaluations(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.curve: list[dict[str, float]] = []
            self.next_eval, self.start, self.solved_at = eval_every, time.perf_counter(), None

        def _evaluate(self) -> bool:
            ret = float(evaluate(actor).mean())
            self.curve.append({"env_steps": self.num_timesteps, "seconds": time.perf_counter() - self.start,
                               "return": ret})
            self.next_eval = (self.num_timesteps // eval_every + 1) * eval_every
            if self.solved_at is None and threshold is not None and ret >= threshold:
                self.solved_at = len(self.curve) - 1
            return not (stop_after and self.solved_at is not None and len(self.curve) - 1 - self.solved_at >= stop_after)

        def _on_rollout_start(self) -> None:
            if self.num_timesteps >= self.next_eval and not self._evaluate():
                self.model._stop = True

        def _on_step(self) -> bool:
            return not getattr(self.model, "_stop", False)

    cb = Evaluations()
    model.learn(total_timesteps=int(zoo["n_timesteps"]), callback=cb)
    if not cb.curve or cb.curve[-1]["env_steps"] < model.num_timesteps:
        cb._evaluate()
    return {"curve": cb.curve, "env_steps": model.num_timesteps, "seconds": time.perf_counter() - cb.start,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "budget": int(zoo["n_timesteps"])}, actor


def run_ours(env_id: str, seed: int, eval_every: int, stop_after: int, keep: Path | None = None) -> dict[str, Any]:
    """The env program with the env's defaults; ``keep``: its run folder (policy included), else a temporary one."""
    with (contextlib.nullcontext(keep.parent) if keep else tempfile.TemporaryDirectory()) as d:
        run = keep or Path(d, "run")
        cmd = [sys.executable, str(ROOT / "recipes/gym_env.py"), "--env_id", env_id, "--seed", str(seed),
               "--eval_every", str(eval_every), "--eval_episodes", "10", "--stop_after_solved", str(stop_after),
               "--output_dir", str(run)]
        if env_id in THRESHOLDS:
            cmd += ["--solved_return", str(THRESHOLDS[env_id])]
        res = subprocess.run(cmd, env={**os.environ, "TQDM_DISABLE": "1"}, capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(f"{shlex.join(cmd)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
        summary = json.loads(Path(run, "summary.json").read_text())
        rows = [json.loads(line) for line in Path(run, "metrics.jsonl").read_text().splitlines()]
    curve = [{"env_steps": r["perf/tokens_total"], "seconds": r["perf/wall_seconds"], "return": r["eval/return"]}
             for r in rows if "eval/return" in r]
    return {"curve": curve, "env_steps": summary["env_steps"], "seconds": summary["seconds"],
            "peak_rss_gib": summary["peak_rss_gib"], "budget": summary.get("total_env_steps")}


def run_sb3(env_id: str, seed: int, eval_every: int, stop_after: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "sb3", "--envs", env_id, "--seeds", str(seed),
           "--eval_every", str(eval_every), "--stop_after", str(stop_after)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def make_row(env_id: str, system: str, seed: int, run: dict[str, Any], threshold: float | None) -> dict[str, Any]:
    """A run's record; without a threshold (MinAtar) ``solved`` is None and only the returns count."""
    curve = run["curve"]
    first = next((i for i, p in enumerate(curve) if threshold is not None and p["return"] >= threshold), None)
    return {
        "env_id": env_id, "system": system, "seed": seed, "solved": None if threshold is None else first is not None,
        "solved_env_steps": curve[first]["env_steps"] if first is not None else None,
        "solved_seconds": curve[first]["seconds"] if first is not None else None,
        "final_eval_return": curve[-1]["return"] if curve else None,
        "env_steps": run["env_steps"], "seconds": run["seconds"], "peak_rss_gib": run["peak_rss_gib"],
        "budget": run.get("budget"), "curve": curve,
    }


def summarise(rows: list[dict], env_id: str) -> dict[str, Any]:
    """Per system: solved count, median env steps and seconds to solve (unsolved = inf), median
    final return and peak RSS; and ours / SB3 of the medians."""
    out: dict[str, Any] = {}
    for s in SYSTEMS:
        mine = [r for r in rows if r["env_id"] == env_id and r["system"] == s]
        if not mine:
            continue
        out[s] = {"solved": None if mine[0]["solved"] is None else sum(r["solved"] for r in mine), "runs": len(mine),
                  "solved_env_steps": statistics.median(inf_if_none(r["solved_env_steps"]) for r in mine),
                  "solved_seconds": statistics.median(inf_if_none(r["solved_seconds"]) for r in mine),
                  "final_eval_return": statistics.median(r["final_eval_return"] for r in mine),
                  "peak_rss_gib": statistics.median(r["peak_rss_gib"] for r in mine)}
    if "ours" in out and "sb3" in out:
        out["ratio_solved_seconds"] = ratio(out["ours"]["solved_seconds"], out["sb3"]["solved_seconds"])
        out["ratio_solved_env_steps"] = ratio(out["ours"]["solved_env_steps"], out["sb3"]["solved_env_steps"])
    return out


def plot(rows: list[dict], envs: list[str], thresholds: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    colours = {"ours": "tab:blue", "sb3": "tab:orange"}
    labels = {"ours": "grpo-seq (ours)", "sb3": "SB3 PPO (rl-zoo3)"}
    fig, axes = plt.subplots(2, len(envs), figsize=(4.2 * len(envs), 6.5), squeeze=False)
    for j, env_id in enumerate(envs):
        for i, (x, xlabel) in enumerate((("env_steps", "env steps"), ("seconds", "wall seconds"))):
            ax, seen = axes[i][j], set()
            for r in (r for r in rows if r["env_id"] == env_id):
                s = r["system"]
                ax.plot([p[x] for p in r["curve"]], [p["return"] for p in r["curve"]], color=colours[s], lw=0.9,
                        alpha=0.8, label=None if s in seen else labels[s])
                seen.add(s)
            if thresholds[env_id] is not None:
                ax.axhline(thresholds[env_id], color="grey", ls="--", lw=0.8)
            if x == "env_steps":  # 1e5-sized ticks run into each other at this width
                ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1000:g}k"))
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
            if i == 0:
                ax.set_title(env_id)
        axes[0][j].legend(loc="lower right", fontsize=8)
    for row in axes:  # MiniGrid's evaluations sample their actions, as rl-zoo3's do
        row[0].set_ylabel("eval return (10 episodes)")
    fig.suptitle("one line per seed; dashed: reward_threshold")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", nargs="+", default=list(ENVS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--long_seeds", type=int, nargs="+", default=None,
                    help="seeds for MountainCar and LunarLander, whose SB3 runs take minutes each (default: --seeds)")
    ap.add_argument("--eval_every", type=int, default=None, help="default: per env (%s)" % EVAL_EVERY)
    ap.add_argument("--stop_after", type=int, default=3, help="stop a run this many evaluations after solving (0: never)")
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                    help="with --merge, re-run these alone and keep the other's rows of the same envs and seeds "
                    "(ours after a change to our defaults: PPO's runs do not depend on them)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="runs at once, each in its own process (2 on a 2-core machine: a seed's two systems side by side)")
    ap.add_argument("--out", type=Path, default=record.default_out("control_vs_sb3"))
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of the other envs already in --out (re-running one env of the suite)")
    ap.add_argument("--extend", action="store_true",
                    help="add --seeds to the --envs already in --out (every row there is kept; a seed it already "
                    "has for an env is refused): more seeds for one env without re-running the others")
    ap.add_argument("--worker", choices=["sb3"], default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    every = lambda env_id: args.eval_every or EVAL_EVERY.get(env_id, 10_000)  # noqa: E731

    if args.worker == "sb3":
        print(json.dumps(sb3_worker(args.envs[0], args.seeds[0], every(args.envs[0]), args.stop_after)))
        return

    thresholds = {e: threshold_of(e) for e in args.envs}
    earlier_seeds: dict[str, list[int]] = {}
    runners = {"ours": run_ours, "sb3": run_sb3}
    rows, t0 = [], time.perf_counter()
    if args.merge and args.out.exists():  # the other envs' rows, measured by an earlier run (its meta is kept in the note)
        rows, earlier_seeds = merge_record(args, thresholds)
    if args.extend:
        if args.merge:
            ap.error("--extend and --merge: give one (--extend adds seeds, --merge re-runs envs)")
        try:
            rows, earlier_seeds, tasks_seeds = extend_record(args, list(args.envs), thresholds)
        except ValueError as e:
            ap.error(f"--extend: {e}")
    fresh = [e for e in args.envs if not any(r["env_id"] == e and r["system"] in args.systems for r in rows)]
    # one system re-run beside the other's kept rows: on the seeds of those rows
    paired = lambda e: e in earlier_seeds and any(r["env_id"] == e for r in rows)  # noqa: E731
    seeds_of = lambda e: (earlier_seeds[e] if e not in fresh or paired(e) else  # noqa: E731
                          args.long_seeds if args.long_seeds and e in LONG else args.seeds)
    tasks = [(env_id, seed, system) for env_id in fresh for k, seed in enumerate(seeds_of(env_id))
             for system in (SYSTEMS if k % 2 == 0 else SYSTEMS[::-1]) if system in args.systems]
    if args.extend:  # the new seeds of every named env; the record's seeds are the old and the new
        fresh = list(tasks_seeds)
        seeds_of = lambda e: sorted(earlier_seeds.get(e, []) + tasks_seeds.get(e, []))  # noqa: E731
        tasks = [(env_id, seed, system) for env_id, new in tasks_seeds.items() for k, seed in enumerate(new)
                 for system in (SYSTEMS if k % 2 == 0 else SYSTEMS[::-1]) if system in args.systems]

    def one(task: tuple[str, int, str]) -> dict[str, Any]:
        env_id, seed, system = task
        r = make_row(env_id, system, seed, runners[system](env_id, seed, every(env_id), args.stop_after),
                     thresholds[env_id])
        print(f"{env_id} {system} seed {seed}: solved at {r['solved_env_steps']} env steps, "
              f"{fmt(r['solved_seconds'], '.1f')} s; final {r['final_eval_return']:.1f}; {r['seconds']:.1f} s",
              flush=True)
        return r

    # --jobs runs that many runs at once, each its own process; in the listed order, so with 2 jobs
    # a seed's two systems run side by side and share the machine alike
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for r in pool.map(one, tasks):
            rows.append(r)
            write(args, rows, thresholds, every, seeds_of)  # after every run: a suite cut short keeps what it measured
    summary = {e: summarise(rows, e) for e in args.envs}
    for e, s in summary.items():  # a system not run yet for an env (--systems ours on a new env): no runs
        ours, sb3 = (s.get(k, {"solved": None, "runs": 0}) for k in SYSTEMS)
        print(f"{e}: ours {ours['solved']}/{ours['runs']} solved, SB3 {sb3['solved']}/{sb3['runs']}; "
              f"median seconds ours/SB3 {fmt(s.get('ratio_solved_seconds'), '.3f')}, env steps "
              f"{fmt(s.get('ratio_solved_env_steps'), '.3f')}")
    print(f"{time.perf_counter() - t0:.0f} s in all")


def merge_record(args: argparse.Namespace, thresholds: dict[str, float]) -> tuple[list, dict]:
    """``--merge``: the record's rows of the envs (and systems) not re-run, and its seeds; sets what
    ``write`` adds: the earlier commands, a note naming the rows the earlier run measured (its own
    command, commit and date; earlier rows keep their note), and each kept env's ``stop_after`` and
    ``jobs`` (``by_env``)."""
    kept = json.loads(args.out.read_text())
    st, earlier = kept["settings"], kept["meta"]
    rows = [r for r in kept["rows"] if r["env_id"] not in args.envs or r["system"] not in args.systems]
    own = [(r["env_id"], r["system"]) for r in rows if "from_commit" not in r]  # measured by the earlier meta's run
    labels = []
    for e in st["envs"]:
        systems = [s for s in SYSTEMS if (e, s) in own]
        labels += [e] if len(systems) == len(SYSTEMS) else [f"{e} ({s})" for s in systems]
    for r in rows:
        r.setdefault("from_commit", earlier.get("commit"))
    fresh = list(args.envs)
    # the suite keeps its order: a re-run env takes its old place, a new one goes last
    args.envs = st["envs"] + [e for e in args.envs if e not in st["envs"]]
    thresholds.update(st["thresholds"])
    commands = [earlier["command"]] if isinstance(earlier["command"], str) else list(earlier["command"])
    mine = (f"rows of {', '.join(labels)} from `{commands[-1]}` at commit {str(earlier.get('commit'))[:10]}, "
            f"{earlier.get('date')}") if labels else ""
    args.earlier_commands = commands
    args.earlier_note = "; ".join(n for n in (earlier.get("note", ""), mine) if n)
    args.by_env = kept_settings(st, fresh)
    return rows, st["seeds"]


def kept_settings(settings: dict[str, Any], named: list[str]) -> dict[str, dict[str, Any]]:
    """How each env of a record that this run does not name ran: its ``stop_after`` and ``jobs``."""
    return {key: {e: settings.get(f"{key}_by_env", {}).get(e, settings.get(key)) for e in settings["envs"]
                  if e not in named} for key in ("stop_after", "jobs")}


def extend_record(args: argparse.Namespace, named: list[str], thresholds: dict[str, float]) -> tuple[list, dict, dict]:
    """``--extend``: the record's rows and seeds, and the new seeds of each env ``named``; sets
    what ``write`` adds to the meta block (the earlier commands, and a note of what this run added)."""
    if not args.out.exists():
        raise ValueError(f"{args.out} does not exist (run without --extend first)")
    kept = json.loads(args.out.read_text())
    earlier_seeds = {e: list(s) for e, s in kept["settings"]["seeds"].items()}
    clash = {e: sorted(set(args.seeds) & set(earlier_seeds.get(e, []))) for e in named}
    if any(clash.values()):
        raise ValueError(f"{args.out} already has seeds {clash} (give new --seeds)")
    args.envs = kept["settings"]["envs"] + [e for e in args.envs if e not in kept["settings"]["envs"]]
    thresholds.update(kept["settings"]["thresholds"])
    rows = kept["rows"]
    for r in rows:
        r.setdefault("from_commit", kept["meta"].get("commit"))
    earlier = kept["meta"]
    args.earlier_commands = [earlier["command"]] if isinstance(earlier["command"], str) else list(earlier["command"])
    args.by_env = kept_settings(kept["settings"], named)
    now = record.meta()
    new = {e: list(args.seeds) for e in args.envs if e in named}
    added = "; ".join(f"{e} seeds {', '.join(map(str, s))} ({', '.join(args.systems)})" for e, s in new.items())
    args.earlier_note = "; ".join(n for n in (earlier.get("note", ""), f"{added} added by `{now['command']}` at commit "
                                              f"{str(now['commit'])[:10]}, {now['date']}") if n)
    return rows, earlier_seeds, new


def by_env(args: argparse.Namespace, envs: list[str]) -> dict[str, dict[str, int]]:
    """``stop_after_by_env``, ``jobs_by_env``: the kept envs' own values where they differ from this run's."""
    out = {}
    for key, values in getattr(args, "by_env", {}).items():
        differ = {e: v for e, v in values.items() if e in envs and v is not None and v != getattr(args, key)}
        if differ:
            out[f"{key}_by_env"] = differ
    return out


def write(args: argparse.Namespace, rows: list[dict], thresholds: dict[str, float], every, seeds_of) -> None:
    envs = [e for e in args.envs if any(r["env_id"] == e for r in rows)]
    meta = record.meta()
    if getattr(args, "earlier_note", None):
        meta["note"] = args.earlier_note
    if getattr(args, "earlier_commands", None):
        meta["command"] = args.earlier_commands + [meta["command"]]
    result = {"meta": meta, "settings": {"envs": envs, "seeds": {e: seeds_of(e) for e in envs},
                                                   "stop_after": args.stop_after, "jobs": args.jobs,
                                                   **by_env(args, envs),
                                                   "eval_every": {e: every(e) for e in envs},
                                                   "thresholds": thresholds, "eval_episodes": 10, "torch_threads": 1},
              "summary": {e: summarise(rows, e) for e in envs}, "rows": rows,
              "note": "null in a solve figure or ratio: never solved (inf) or inf/inf"}
    record.prepare(args.out).write_text(json.dumps(jsonable(result), indent=2))
    plot(rows, envs, thresholds, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
