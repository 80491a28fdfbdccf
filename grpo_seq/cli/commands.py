"""The ``grpo-seq`` command: one subcommand per program, each with ``--help`` and ``--config FILE`` (YAML or JSON).

    grpo-seq train-lm --model MODEL --dataset prompts.jsonl --reward_funcs mypkg.rewards:fn
    grpo-seq train-env --env_id CartPole-v1
    grpo-seq train-text-env --model MODEL --env_id textarena:GuessTheNumber-v0
    grpo-seq train-agent --model MODEL --rollout mypkg.agent:rollout --dataset items.jsonl
    grpo-seq run runs/<run>/config.json --output_dir runs/again   # any job spec file, by its kind
    grpo-seq eval lm --model runs/<run>/model --dataset dev.jsonl --reward_funcs mypkg.rewards:fn
    grpo-seq eval env --policy runs/<run>/policy --env_id CartPole-v1
    grpo-seq launch --num_processes 2 recipes/cartpole.py   # accelerate launch, quiet
    grpo-seq record --policy runs/<run>/policy --out agent.gif
    grpo-seq plot runs/<run> [runs/<other> ...]
    grpo-seq serve --port 8000 --store runs/service   # the HTTP service and its page

Each subcommand hands the rest of the command line to its program, which parses it itself
(:func:`grpo_seq.cli.parse.parse_config`): the options are the recipes' own. The working folder is
importable, so ``--reward_funcs mypkg.rewards:fn`` finds ``./mypkg/rewards.py``.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Callable, Sequence

__all__ = ["main", "COMMANDS"]


def _train_lm(argv: list[str]) -> None:
    from .programs import train_lm

    train_lm(argv)


def _train_env(argv: list[str]) -> None:
    from .programs import train_env

    train_env(argv)


def _train_text_env(argv: list[str]) -> None:
    from .programs import train_text_env

    train_text_env(argv)


def _train_agent(argv: list[str]) -> None:
    from .agent import train_agent

    train_agent(argv)


def _run(argv: list[str]) -> None:
    """``grpo-seq run SPEC [flags]``: the training program of the spec's kind, with ``--config SPEC``."""
    from ..errors import UsageError
    from ..jobs.spec import read_mapping
    from .errors import cli_errors

    if argv[:1] in (["-h"], ["--help"]):
        print("usage: grpo-seq run SPEC [options]\n\nRun the job a spec file describes (YAML or JSON; a run "
              "folder's config.json is one)\nwith the training program of its kind (train-env, train-lm, "
              "train-text-env, train-agent);\nthe options that follow override the file's. grpo-seq run SPEC --help "
              "lists them.")
        return
    with cli_errors():
        if not argv or argv[0].startswith("-"):
            raise UsageError("grpo-seq run: give a job spec file first (YAML or JSON: a run folder's config.json is "
                             "one), then any options to override")
        kind = read_mapping(argv[0]).get("kind")
        programs = {"env": "train-env", "lm": "train-lm", "text_env": "train-text-env", "agent": "train-agent"}
        if kind not in programs:
            raise UsageError(f"grpo-seq run {argv[0]}: its 'kind' is {kind!r}; a job spec names one of "
                             f"{sorted(programs)}")
    COMMANDS[programs[kind]][1](["--config", argv[0], *argv[1:]])


def _eval_lm(argv: list[str]) -> None:
    from .tools import eval_lm

    eval_lm(argv)


def _eval_env(argv: list[str]) -> None:
    from .tools import eval_env

    eval_env(argv)


def _launch(argv: list[str]) -> None:
    from .launch import launch

    launch(argv)


def _record(argv: list[str]) -> None:
    from .tools import record

    record(argv)


def _plot(argv: list[str]) -> None:
    from .tools import plot

    plot(argv)


def _serve(argv: list[str]) -> None:
    """``grpo-seq serve``: the HTTP service, a door of its own, run as ``python -m grpo_seq.serve``
    runs it (by module name: one door imports no other)."""
    import runpy

    sys.argv = ["grpo-seq serve", *argv]
    runpy.run_module("grpo_seq.serve", run_name="__main__", alter_sys=True)


# name -> (what it does, the program); "eval" has two of its own.
COMMANDS: dict[str, tuple[str, Callable[[list[str]], None]]] = {
    "train-lm": ("train a language model on prompts and reward functions", _train_lm),
    "train-env": ("train a policy on a discrete-action gymnasium env", _train_env),
    "train-text-env": ("train a language model acting over several turns in a text environment", _train_text_env),
    "train-agent": ("train an agent program that calls the policy through the OpenAI API (the agents extra)",
                    _train_agent),
    "run": ("run a job spec file (a run folder's config.json repeats that run)", _run),
    "eval lm": ("greedy completions of a dataset, scored by reward functions", _eval_lm),
    "eval env": ("greedy episodes of a saved env policy", _eval_env),
    "launch": ("accelerate launch, quiet: several processes or GPUs, a failure as one line", _launch),
    "record": ("a greedy episode of a saved env policy as a GIF", _record),
    "plot": ("learning curves of run folders", _plot),
    "serve": ("the HTTP service: train, watch and query models (the serve extra)", _serve),
}


def plain_text(doc: str) -> str:
    """A docstring as a terminal shows it: ``:func:`x``` and ````x```` as ``x``."""
    return re.sub(r":\w+:`([^`]+)`", r"\1", doc).replace("``", "")


class _OneLineParser(argparse.ArgumentParser):
    """argparse, with a misuse (no command, an unknown one) as one ``error:`` line, exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message}; see {self.prog} --help", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    ap = _OneLineParser(prog="grpo-seq", description=plain_text(__doc__),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
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
    sys.argv = [f"grpo-seq {name}", *rest]  # the resume command a stopped run prints starts with this
    try:
        COMMANDS[name][1](rest)
    except KeyboardInterrupt:  # Ctrl-C while a program starts (a run in training checkpoints first)
        print(f"grpo-seq {name}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
