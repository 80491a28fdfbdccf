"""The ``grpo-seq`` command: one subcommand per program, each with ``--help`` and ``--config FILE.yaml``.

    grpo-seq train-lm --model MODEL --dataset prompts.jsonl --reward_funcs mypkg.rewards:fn
    grpo-seq train-env --env_id CartPole-v1
    grpo-seq eval lm --model runs/<run>/model --dataset dev.jsonl --reward_funcs mypkg.rewards:fn
    grpo-seq eval env --policy runs/<run>/policy --env_id CartPole-v1
    grpo-seq plot runs/<run> [runs/<other> ...]

Each subcommand hands the rest of the command line to its program, which parses it itself
(:func:`grpo_seq.cli.parse_config`): the options are the recipes' own. The working folder is
importable, so ``--reward_funcs mypkg.rewards:fn`` finds ``./mypkg/rewards.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

__all__ = ["main", "COMMANDS"]


def _train_lm(argv: list[str]) -> None:
    from .train_lm import main

    main(argv)


def _train_env(argv: list[str]) -> None:
    from .train_env import main

    main(argv)


def _eval_lm(argv: list[str]) -> None:
    from .eval_lm import main

    main(argv)


def _eval_env(argv: list[str]) -> None:
    from .evaluation import main

    main(argv)


def _plot(argv: list[str]) -> None:
    from .plot import main

    main(argv)


# name -> (what it does, the program); "eval" has two of its own.
COMMANDS: dict[str, tuple[str, Callable[[list[str]], None]]] = {
    "train-lm": ("train a language model on prompts and reward functions", _train_lm),
    "train-env": ("train a policy on a discrete-action gymnasium env", _train_env),
    "eval lm": ("greedy completions of a dataset, scored by reward functions", _eval_lm),
    "eval env": ("greedy episodes of a saved env policy", _eval_env),
    "plot": ("learning curves of run folders", _plot),
}


class _OneLineParser(argparse.ArgumentParser):
    """argparse, with a misuse (no command, an unknown one) as one ``error:`` line, exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message}; see {self.prog} --help", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    ap = _OneLineParser(prog="grpo-seq", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    evaluate = sub.add_parser("eval", help="evaluate a language model (eval lm) or an env policy (eval env)")
    eval_sub = evaluate.add_subparsers(dest="target", required=True, metavar="TARGET")
    for name, (what, _) in COMMANDS.items():
        parent, _, leaf = name.rpartition(" ")
        owner = eval_sub if parent else sub
        # the program prints its own --help: its options, with their defaults
        owner.add_parser(leaf, help=what, add_help=False)
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    """``grpo-seq COMMAND [options]``: run COMMAND's program with the options that follow it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, rest = _parser().parse_known_args(argv)
    name = f"eval {args.target}" if args.command == "eval" else args.command
    # Reward functions and envs named by import path live beside the user, as with `python -m`.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    sys.argv = [f"grpo-seq {name}", *rest]  # the resume command a stopped run prints starts with this
    COMMANDS[name][1](rest)


if __name__ == "__main__":
    main()
