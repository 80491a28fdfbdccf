"""The service's options (:class:`ServeConfig`), read from the command line, and its token."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from typing import Sequence

from ..errors import ConfigError

__all__ = ["ServeConfig", "parse_args", "TOKEN_ENV", "resolve_token"]

TOKEN_ENV = "GRPO_SEQ_API_TOKEN"


@dataclass
class ServeConfig:
    """How the service listens, where it keeps its jobs and models, and the bounds it sets on requests."""

    host: str = field(default="127.0.0.1", metadata={
        "help": f"Address to listen on. Anything but a loopback address needs {TOKEN_ENV} set (a generated token "
                "printed on a shared machine would be read by whoever sees the log)."})
    port: int = field(default=8000, metadata={"help": "Port to listen on."})
    store: str = field(default="grpo_seq_store", metadata={
        "help": "Folder of the service's state: jobs/<id>/ (each job's record, log and run folder), models/<name>.json "
                "(the trained models), data/ (datasets language-model jobs may name)."})
    max_jobs: int = field(default=2, metadata={"help": "Jobs running at once; one more is refused with 429."})
    max_body_bytes: int = field(default=1_048_576, metadata={"help": "Largest request body accepted (413 above)."})
    max_env_steps: int = field(default=10_000_000, metadata={"help": "Largest total_timesteps (env steps) a job may ask for."})
    max_lm_steps: int = field(default=10_000, metadata={"help": "Largest max_steps a language-model job may ask for."})
    max_batch: int = field(default=4096, metadata={"help": "Most observations in one inference request."})
    max_new_tokens: int = field(default=512, metadata={
        "help": "Most new tokens one language-model completion may ask for, and a job's max_completion_length."})
    max_loaded_models: int = field(default=4, metadata={
        "help": "Most models kept loaded for inference (/inference, /v1/chat/completions); the least recently used "
                "beyond it is let go and loaded again when next asked for."})
    max_policy_params: int = field(default=10_000_000, metadata={
        "help": "Most parameters of an env job's policy network (hidden_sizes with the env's observation and action "
                "sizes): 10M float32 weights and Adam's two moments take about 120 MB."})
    max_outputs_per_step: int = field(default=1024, metadata={
        "help": "Most outputs a job samples a step, num_generations x num_groups (episodes or completions)."})
    max_checkpoints: int = field(default=3, metadata={
        "help": "Most checkpoints a job keeps (save_total_limit; 0, keep all, is refused)."})
    min_save_steps: int = field(default=10, metadata={
        "help": "Fewest steps between a job's checkpoints (save_steps; 0, none, is allowed)."})
    max_eval_episodes: int = field(default=1000, metadata={"help": "Most episodes of one evaluation (eval_episodes)."})

    def __post_init__(self) -> None:
        for name in ("max_jobs", "max_body_bytes", "max_env_steps", "max_lm_steps", "max_batch", "max_new_tokens",
                     "max_loaded_models", "max_policy_params", "max_outputs_per_step", "max_checkpoints",
                     "min_save_steps", "max_eval_episodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name}: must be >= 1, got {getattr(self, name)!r}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port: must be in 0..65535, got {self.port!r}")


def parse_args(argv: Sequence[str] | None = None, prog: str = "python -m grpo_seq.serve") -> ServeConfig:
    """``argv`` as a :class:`ServeConfig`: one flag per field, its help from the field; a misuse exits 2."""
    ap = argparse.ArgumentParser(prog=prog, description="The grpo-seq HTTP service: train, watch and query models.")
    for f in dataclasses.fields(ServeConfig):
        ap.add_argument(f"--{f.name}", type=type(f.default), default=f.default,
                        help=f"{f.metadata['help']} (default: {f.default})")
    args = ap.parse_args(argv)
    try:
        return ServeConfig(**vars(args))
    except ConfigError as e:
        ap.exit(2, f"error: {e}\n")


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


MIN_TOKEN_CHARS = 16  # beyond loopback: a token short enough to guess is no lock


def resolve_token(host: str, environ: dict | None = None) -> tuple[str, bool]:
    """The bearer token, and whether it was generated here (then it is printed once). Refuses a
    non-loopback ``host`` without a token set in ``GRPO_SEQ_API_TOKEN``."""
    env = os.environ if environ is None else environ
    token = env.get(TOKEN_ENV, "")
    if token.strip() != token or (token and not token.isprintable()):
        raise ConfigError(f"{TOKEN_ENV}: has spaces at its ends or control characters, which an "
                          "Authorization header cannot carry back as they are; set it without them")
    if token and not is_loopback(host) and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{TOKEN_ENV}: {len(token)} characters; listening beyond this machine (--host {host}) "
                          f"needs at least {MIN_TOKEN_CHARS}, which guessing cannot reach (python -c \"import secrets; "
                          "print(secrets.token_urlsafe(24))\" makes one)")
    if token:
        return token, False
    if not is_loopback(host):
        raise ConfigError(f"--host {host}: listening beyond this machine needs a token; set {TOKEN_ENV} "
                          "(the service will not generate one for a non-loopback address)")
    return secrets.token_urlsafe(24), True
