"""Saving a trainer's policy, writing its checkpoints and resuming from one, so that a resumed run
goes on exactly as if it had never stopped (:mod:`grpo_seq.io.checkpoint` holds the file format)."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from accelerate.utils import gather_object

from ..io import checkpoint as ckpt
from .config import LoopConfig
from .diagnostics import SignalWatch
from .entropy_control import EntropyControl
from ..sampling.base import Resumable
from ..io.serialization import link_folder, save_policy

if TYPE_CHECKING:
    from .trainer import GRPOLoop

__all__ = ["save_policy_folder", "save_checkpoint", "resume", "check_resumable"]

logger = logging.getLogger(__name__)

Extra = dict[str, Any] | Callable[[], dict[str, Any]] | None


def save_policy_folder(trainer: GRPOLoop, directory: Path, **kwargs) -> None:
    """The policy's weights in ``directory``, atomically (main process). When this step was just
    checkpointed with the same weights, the weight files are hard links to the checkpoint's: the
    final model is on disk once."""
    trainer.guard.check_saveable(trainer.policy, directory)
    out = trainer.output_dir
    same = ckpt.checkpoint_dir(out, trainer.step_count) / "policy" if out else None
    merging = getattr(trainer.policy, "has_adapters", False) and kwargs.get("merged", True)
    if same is not None and same.is_dir() and trainer.checkpointed_step == trainer.step_count and not merging:
        link_folder(same, directory)
    else:
        save_policy(trainer.policy, directory, **kwargs)


def save_checkpoint(trainer: GRPOLoop, extra: Extra) -> Path:
    """``<output_dir>/checkpoints/step_XXXXXXXX/`` (:func:`grpo_seq.io.checkpoint.write_checkpoint`),
    keeping the newest ``save_total_limit``. Every process contributes its RNG and sampler state;
    the main process writes."""
    acc, cfg, sampler = trainer.accelerator, trainer.config, trainer.sampler
    rng_states = gather_object([{
        "global": ckpt.rng_state(), "shuffle": ckpt.generator_state(trainer.shuffle_gen),
        "sampler": sampler.state_dict() if isinstance(sampler, Resumable) else None,
    }])
    target = ckpt.checkpoint_dir(trainer.output_dir, trainer.step_count)
    if acc.is_main_process:
        trainer.guard.check_saveable(trainer.policy, target)
        moving_ref = trainer.ref_policy if cfg.ref_sync_steps else None  # else: the initial policy
        trainer.checkpointed_step = trainer.step_count
        ckpt.write_checkpoint(
            trainer.output_dir, trainer.step_count, policy=trainer.policy,
            optimizer_state=trainer.optimizer.state_dict() if cfg.save_optimizer else None,
            trainer_state={"step": trainer.step_count, "tokens_sampled": trainer.tokens_sampled, "num_processes": acc.num_processes,
                           "signal": dataclasses.asdict(trainer.signal),
                           "entropy_control": dataclasses.asdict(trainer.entropy_control),
                           "config": cfg.to_dict(), "extra": extra() if callable(extra) else (extra or {})},
            rng_states=rng_states, ref_policy=moving_ref, keep=cfg.save_total_limit,
        )
    acc.wait_for_everyone()
    return target


def resume(trainer: GRPOLoop, folder: Path) -> dict[str, Any]:
    """Restore checkpoint ``folder`` into ``trainer``: weights, optimizer, counters, every RNG and
    the sampler's position. Returns the ``extra`` state saved with it."""
    acc = trainer.accelerator
    check_resumable(trainer.config, folder, ckpt.read_json(folder / "trainer_state.json"), acc.is_main_process)
    state, optimizer_state, rng = ckpt.load_checkpoint(folder, trainer.policy, trainer.ref_policy, acc.process_index)
    if isinstance(state.get("signal"), dict):
        trainer.signal = SignalWatch(**state["signal"])
    if isinstance(state.get("entropy_control"), dict):
        trainer.entropy_control = EntropyControl(**state["entropy_control"])
    if optimizer_state is None:
        logger.warning("%s holds no optimizer state (saved with save_optimizer=False): Adam's moments start "
                       "afresh, so this run will not repeat the uninterrupted one exactly", folder)
    else:
        try:
            trainer.optimizer.load_state_dict(optimizer_state)
        except (ValueError, KeyError) as e:
            raise ckpt.CheckpointError(f"checkpoint {folder}: optimizer.pt does not fit this policy's parameters: {e}") from None
    trainer.step_count, trainer.tokens_sampled = int(state["step"]), int(state["tokens_sampled"])
    trainer.guard.last_norm = None  # the weights were just loaded
    if rng is None:
        logger.warning(
            "%s has no RNG state for process %d (it was written by %d processes): this process starts fresh "
            "random streams, so the run will not repeat the uninterrupted one exactly",
            folder, acc.process_index, state.get("num_processes", 1),
        )
    else:
        ckpt.set_rng_state(rng["global"])
        ckpt.set_generator_state(trainer.shuffle_gen, rng["shuffle"])
        if rng.get("sampler") is not None and isinstance(trainer.sampler, Resumable):
            trainer.sampler.load_state_dict(rng["sampler"])
    return state.get("extra") or {}


def check_resumable(config: LoopConfig, folder: Path, state: Any, main_process: bool) -> None:
    """Refuse a checkpoint trained with other options than ``config``, except those the config
    lists in ``RESUME_MAY_CHANGE`` (budgets, logging, saving), which are printed as changed."""
    saved = state.get("config") if isinstance(state, dict) else None
    if not isinstance(saved, dict):
        return  # a checkpoint without its config (written by hand): nothing to compare
    mine = json.loads(json.dumps(config.to_dict()))  # tuples as lists, as the file has them
    changed = {k: (saved[k], v) for k, v in mine.items() if k in saved and saved[k] != v}
    may_change = type(config).RESUME_MAY_CHANGE
    refused = {k: v for k, v in changed.items() if k not in may_change}
    if refused:
        raise ckpt.CheckpointError(
            f"--resume_from {folder}: the checkpoint was trained with other options: "
            + "; ".join(f"--{k} was {a!r}, is {b!r} now" for k, (a, b) in refused.items())
            + ". Resume with the run's own values (its config.json), or start a new run"
        )
    allowed = {k: v for k, v in changed.items() if k not in ("resume_from", "output_dir", "overwrite")}
    if allowed and main_process:
        print("resuming with changed options: " + "; ".join(f"--{k} {a!r} -> {b!r}" for k, (a, b) in allowed.items()),
              flush=True)
