"""The command line's tools around runs: evaluate a saved model or env policy, record it, plot runs.

    grpo-seq eval lm --model runs/<run>/model --dataset dev.jsonl --reward_funcs mypkg.rewards:fn
    grpo-seq eval env --policy runs/<run>/policy --env_id Acrobot-v1 --episodes 100
    grpo-seq record --policy runs/<run>/policy --out agent.gif
    grpo-seq plot runs/<run> [runs/<other> ...] [--out curves.png] [--x env_steps] [--smooth 5]

Each ends a misuse as one ``error: ...`` line with exit status 2 (:func:`grpo_seq.cli.errors.cli_errors`).
"""

from __future__ import annotations

import argparse
import errno
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..io.disk import nearest_existing
from ..errors import ConfigError, UsageError
from .errors import cli_errors
from .parse import parse_config

__all__ = ["EvalEnvArgs", "RecordArgs", "eval_lm", "eval_env", "record", "plot"]


def eval_lm(argv: list[str] | None = None) -> dict:
    """``grpo-seq eval lm``: greedy completions scored by reward functions (:mod:`grpo_seq.jobs.eval_lm`)."""
    from ..jobs.eval_lm import EvalLMConfig, evaluate
    from .programs import quiet_libraries, working_folder_importable

    working_folder_importable()
    quiet_libraries()
    with cli_errors():
        return evaluate(parse_config(EvalLMConfig, argv))


@dataclass
class EvalEnvArgs:
    policy: str = field(metadata={"help": "Folder of a saved policy (model.safetensors + policy.json)."})
    env_id: str = field(default="CartPole-v1", metadata={"help": "gymnasium env id."})
    episodes: int = field(default=10, metadata={"help": "Greedy episodes."})
    seed: int = field(default=0, metadata={"help": "Reset seed of the episodes."})
    env_wrappers: list[str] | None = field(
        default=None, metadata={"help": "The wrappers the policy was trained inside, by import path (as train-env's "
                                "--env_wrappers; default: the env family's)."})
    greedy: bool | None = field(
        default=None, metadata={"help": "The likeliest action at each step (false: sampled, seeded by --seed); default: "
                                "the env family's (train-env's --eval_greedy).", "nargs": "?", "const": True})

    def __post_init__(self) -> None:
        if not 1 <= self.episodes <= MAX_EPISODES:
            raise ConfigError(f"--episodes: must be in [1, {MAX_EPISODES:,}], got {self.episodes}")
        check_seed(self.seed)


# An evaluation keeps every episode's return (and its env) in memory at once.
MAX_EPISODES = 100_000


def check_seed(seed: int) -> None:
    """gymnasium seeds through numpy, which takes 32 bits; refuse others by name."""
    if not 0 <= seed < 2**32:
        raise ConfigError(f"--seed: must be in [0, 2**32 - 1], got {seed}")


def _load_policy_folder(path: str) -> Any:
    """:func:`grpo_seq.io.serialization.load_policy` of ``--policy``; a file (a ``GRPO.save`` zip,
    say) is refused by name first, rather than as a missing ``<file>/policy.json``."""
    from ..io.serialization import load_policy

    if Path(path).expanduser().is_file():
        raise UsageError(f"--policy {path} is a file; give the folder of a saved policy (model.safetensors and "
                         "policy.json, as a run's policy/); a GRPO.save zip is read with GRPO.load in Python")
    return load_policy(Path(path).expanduser())


def eval_env(argv: list[str] | None = None) -> None:
    """``grpo-seq eval env --policy DIR``: greedy returns of a saved policy, as JSON."""
    from ..jobs.env import env_wrappers, eval_greedy, policy_action_bins
    from ..scoring.evaluation import PolicyEvaluator

    with cli_errors():
        args = parse_config(EvalEnvArgs, argv)
        policy = _load_policy_folder(args.policy)
        # a continuous action is cut into as many values as the policy was trained on
        evaluate = PolicyEvaluator(args.env_id, args.episodes, action_bins=policy_action_bins(policy),
                                   wrappers=env_wrappers(args.env_id, args.env_wrappers),
                                   greedy=eval_greedy(args.env_id, args.greedy))
        obs_dim = evaluate.envs.single_observation_space.shape[0]
        wanted = getattr(policy, "init_kwargs", {}).get("obs_dim", obs_dim)
        if wanted != obs_dim:
            raise UsageError(f"--policy {args.policy} takes {wanted} observation numbers; {args.env_id} gives "
                             f"{obs_dim}: give the env_id it was trained on")
        returns = evaluate(policy, seed=args.seed)
    print(json.dumps({"env_id": args.env_id, "seed": args.seed, "mean_return": float(returns.mean()),
                      "returns": returns.tolist()}))


@dataclass
class RecordArgs:
    policy: str = field(metadata={"help": "Folder of a saved policy (model.safetensors + policy.json)."})
    env_id: str = field(default="CartPole-v1", metadata={"help": "gymnasium env id with an rgb_array renderer."})
    out: str = field(default="agent.gif", metadata={"help": "GIF to write (an MP4 beside it when ffmpeg is installed)."})
    seed: int = field(default=0, metadata={"help": "Reset seed of the episode."})
    fps: int = field(default=50, metadata={"help": "Frames per second."})
    scale: float = field(default=0.5, metadata={"help": "Frame size relative to the renderer's."})
    overwrite: bool = field(default=False, metadata={"help": "Replace --out when it exists already."})

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if self.fps < 1:
            raise ConfigError(f"--fps: must be >= 1, got {self.fps}")
        if not 0 < self.scale <= 8:
            raise ConfigError(f"--scale: must be in (0, 8], got {self.scale}")
        out = Path(self.out).expanduser()
        if out.exists() and not self.overwrite:
            raise UsageError(f"--out {self.out} exists; give another --out, or --overwrite to replace it")


def record(argv: list[str] | None = None) -> None:
    """``grpo-seq record --policy DIR``: a greedy episode of a saved policy as a GIF."""
    from ..io.record import record_episode
    from ..jobs.budget import record_frames

    with cli_errors():
        args = parse_config(RecordArgs, argv)
        policy = _load_policy_folder(args.policy)
        folder = nearest_existing(Path(args.out).expanduser().parent)
        if not folder.is_dir():
            raise UsageError(f"--out {args.out}: would be inside {folder}, which is a file, not a folder")
        try:
            info = record_episode(policy, args.env_id, args.out, seed=args.seed, fps=args.fps, scale=args.scale,
                                  max_steps=record_frames())
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EFBIG):
                raise  # the full-disk line
            raise UsageError(f"--out {args.out}: cannot be written ({e.strerror or e})") from None
    print(json.dumps(info))


def plot(argv: Sequence[str] | None = None) -> None:
    """``grpo-seq plot RUN [RUN ...]``: learning curves. A run's own ``curves.png`` (the default
    for one run) is refreshed; any other existing file is replaced only with ``--overwrite``."""
    from ..io.plot import X_AXES, plot_runs

    ap = argparse.ArgumentParser(prog="grpo-seq plot", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="Run folders (or metrics.jsonl files).")
    ap.add_argument("--out", default=None, help="PNG to write (default: <first run>/curves.png).")
    ap.add_argument("--x", default="step", choices=sorted(X_AXES), help="Horizontal axis.")
    ap.add_argument("--smooth", type=int, default=1, help="Trailing mean over this many points (1: raw).")
    ap.add_argument("--overwrite", action="store_true", help="Replace --out when it exists already.")
    a = ap.parse_args(argv)
    with cli_errors():
        if a.smooth < 1:
            raise ConfigError(f"--smooth: must be >= 1 (1: raw), got {a.smooth}")
        runs = [Path(r).expanduser() for r in a.runs]
        own = (runs[0] if runs[0].is_dir() else runs[0].parent) / "curves.png"
        out = Path(a.out).expanduser() if a.out else own
        # a run's curves.png is drawn from its own metrics: refreshing it loses nothing
        if out.exists() and not a.overwrite and not (out == own and len(runs) == 1):
            raise UsageError(f"{out} exists; give --out FILE.png for a new file, or --overwrite to replace it")
        titles = plot_runs(runs, out, x=a.x, smooth=a.smooth)
    print(f"wrote {out}: {len(titles)} panels ({', '.join(titles)}) for {len(a.runs)} run(s)")
