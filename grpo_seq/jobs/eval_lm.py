"""Greedy completions of a prompt dataset, scored by reward functions (what ``grpo-seq eval lm`` runs).

    grpo-seq eval lm --model runs/<run>/model --dataset dev.jsonl --reward_funcs mypkg.rewards:fn
    grpo-seq eval lm --help

The dataset and reward functions are given as to ``grpo-seq train-lm`` (TRL's formats; import
paths, the working folder importable). Writes ``<output_dir>/eval.json`` (the mean total reward,
each function's mean over the rows it scored, ``n``) and ``<output_dir>/completions.jsonl`` (each
prompt, its completion and rewards). An evaluation owns its folder as a training run does
(:mod:`grpo_seq.io.run_dir`): without ``--output_dir`` each evaluation gets a new one
(``runs/eval_lm__<unix time>``); a folder that holds an evaluation already is refused unless
``--overwrite`` (which replaces only ``eval.json`` and ``completions.jsonl``, once the new ones
are written); the folder is locked while the evaluation runs. A task's program (a recipe)
subclasses :class:`EvalLMConfig` with its defaults (``EVAL_NAME`` names its default folders) and
passes :func:`evaluate` its short reward names and its own measures.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Mapping, Sequence

import torch

from .budget import shrink
from ..errors import ConfigError, RunDirError, require, require_format
from ..generation.prompts import check_prompt_lengths
from ..scoring.heldout import HeldOutSet, best_constant_of, compare, score_greedy
from ..io.models import load_model_and_tokenizer
from ..io.prompt_data import prompt_rows, read_rows, row_place
from ..scoring.rewards import RewardScorer
from ..io.run_dir import RunLock
from ..io.serialization import atomic_write_text

__all__ = ["EvalLMConfig", "Report", "EVAL_FILES", "evaluate", "eval_folder", "score_greedy"]

EVAL_FILES = ("eval.json", "completions.jsonl")  # what an evaluation writes into its folder

Report = Callable[[Sequence[dict], Sequence[str]], tuple[dict[str, Any], list[dict[str, Any]]]]
"""A task's own measures: ``report(rows, completions) -> (values added to eval.json, one dict of
fields added to each row's record in completions.jsonl)``."""


@dataclass
class EvalLMConfig:
    EVAL_NAME: ClassVar[str] = "eval_lm"  # the default folder is runs/<EVAL_NAME>__<unix time>

    model: str | None = field(default=None, metadata={"help": "Hub id, local folder (e.g. a run's model/) or .gguf file."})
    dataset: str | None = field(
        default=None, metadata={"help": "A .jsonl, .json, .parquet or .csv file, a save_to_disk folder, or a hub id."})
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    dataset_split: str = field(default="test", metadata={"help": "Split of a hub dataset or a saved DatasetDict."})
    prompt_column: str | None = field(default=None, metadata={"help": "The prompt's column (default: prompt, else question)."})
    answer_column: str | None = field(default=None, metadata={"help": "A column given to the rewards as 'answer'."})
    system_prompt: str = field(default="", metadata={"help": "System message before each prompt ('' for none)."})
    instruction: str = field(default="", metadata={"help": "Appended to each string prompt ('' for none)."})
    as_chat: bool = field(default=False, metadata={"help": "Send string prompts through the chat template."})
    reward_funcs: list[str] = field(
        default_factory=list, metadata={"help": "Reward functions by import path (mypkg.rewards:my_fn)."})
    reward_weights: list[float] | None = field(default=None, metadata={"help": "One weight per reward function."})
    metric: str | None = field(
        default=None, metadata={"help": "The reward function whose value is an item's score, given with its 95 percent "
                                "interval and beside the best constant answer's (default: the first)."})
    answer_format: str = field(
        default="{answer}", metadata={"help": "A gold answer (the 'answer' column) written as a completion, tried as "
                                      "the constant answer given to every item (the majority baseline)."})
    limit: int = field(default=0, metadata={"help": "Evaluate the first N prompts only (0: all)."})
    max_new_tokens: int = field(default=256, metadata={"help": "Most tokens per completion."})
    batch_size: int = field(default=16, metadata={"help": "Prompts per generate call."})
    dtype: str = field(default="float32", metadata={"help": "float32 or bfloat16."})
    torch_threads: int = field(default=0, metadata={"help": "torch CPU threads (0: torch's default)."})
    trust_remote_code: bool = field(default=False, metadata={"help": "Run model code from the hub (off: safe)."})
    output_dir: str | None = field(default=None, metadata={
        "help": "Where eval.json and completions.jsonl go (default: a new folder for each evaluation, "
                "runs/eval_lm__<unix time>)."})
    overwrite: bool = field(
        default=False, metadata={"help": "Replace the evaluation output_dir already holds (without it, refused)."})

    def __post_init__(self) -> None:
        for name in ("limit", "torch_threads"):
            require(self, name, getattr(self, name) >= 0, "must be >= 0")
        require_format(self, "answer_format", "answer")
        for name in ("max_new_tokens", "batch_size"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")


def evaluate(cfg: EvalLMConfig, reward_funcs: Sequence[Callable | str] | None = None,
             registry: Mapping[str, Callable] | None = None, report: Report | None = None) -> dict:
    """Check every row and reward function, generate, score, write eval.json and completions.jsonl.

    ``reward_funcs``: the functions (default: ``cfg.reward_funcs``, loaded by name from
    ``registry`` or by import path). ``report``: the task's own measures (:data:`Report`)."""
    for name in ("model", "dataset"):
        if getattr(cfg, name) is None:
            raise ConfigError(f"--{name}: required")
    out = eval_folder(cfg)
    quick = shrink(cfg, "eval_lm")  # GRPO_SEQ_QUICK: a smoke test's budget
    if quick:
        print(quick, flush=True)
    fns = list(reward_funcs or cfg.reward_funcs)
    if not fns:
        raise ConfigError("--reward_funcs: give at least one reward function (package.module:function)")
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    source = f"--dataset {cfg.dataset}"
    rows = prompt_rows(read_rows(cfg.dataset, cfg.dataset_split, cfg.dataset_config), cfg.prompt_column,
                       cfg.answer_column, cfg.system_prompt, cfg.instruction, cfg.as_chat, source=source)
    rows = rows[: cfg.limit] if cfg.limit else rows
    scorer = RewardScorer(fns, cfg.reward_weights, registry)
    scorer.check_dataset(rows, source)  # a bad row found after generating would waste the evaluation
    if cfg.metric is not None and cfg.metric not in scorer.names:
        raise ConfigError(f"--metric: no reward function {cfg.metric!r}; given: {', '.join(scorer.names)}")
    model, tokenizer = load_model_and_tokenizer(cfg.model, cfg.dtype, cfg.trust_remote_code)
    check_prompt_lengths(tokenizer, [r["prompt"] for r in rows], cfg.max_new_tokens,
                         getattr(model.config, "max_position_embeddings", None), lambda i: row_place(rows, i, source))
    with _claimed(out, cfg.overwrite):
        t0 = time.perf_counter()
        metrics, records = score_greedy(model, tokenizer, rows, scorer, cfg.max_new_tokens, cfg.batch_size, progress=True)
        metrics.update(_against_constant(cfg, rows, scorer, records))
        if report is not None:
            measures, added = report(rows, [r["completion"] for r in records])
            metrics = {**metrics, **measures}
            records = [{**r, **a} for r, a in zip(records, added)]
        result = {**metrics, "model": cfg.model, "dataset": cfg.dataset, "max_new_tokens": cfg.max_new_tokens,
                  "seconds": round(time.perf_counter() - t0, 1), "output_dir": str(out)}
        _write_results(out, result, records)
    return result


def _against_constant(cfg: EvalLMConfig, rows: Sequence[dict], scorer: RewardScorer, records: list[dict]) -> dict:
    """The metric's score with its interval, the best constant answer's, and the paired difference
    (:mod:`grpo_seq.scoring.heldout`)."""
    metric = cfg.metric or scorer.names[0]
    heldout = HeldOutSet(rows, scorer, metric, cfg.answer_format)
    scores = [float(r["rewards"][metric] or 0.0) for r in records]
    figures = compare(scores, None, best_constant_of(heldout, [{"completion": r["completion"]} for r in records]))
    out = {"metric": metric, "score": figures["base"]["score"], "interval": figures["base"]["interval"]}
    if "best_constant" in figures:
        out.update(best_constant=figures["best_constant"], minus_constant=figures["base_minus_constant"])
    return out


def eval_folder(cfg: EvalLMConfig) -> Path:
    """The evaluation's folder, checked before anything is loaded: ``cfg.output_dir``, or (set
    there) a new ``runs/<EVAL_NAME>__<unix time>`` (``_2``, ``_3``, ... when that one exists).
    A folder that holds an evaluation already is refused unless ``cfg.overwrite``; so is one that
    cannot be made or written."""
    from ..io.disk import check_output_dir

    if not cfg.output_dir:
        base = Path("runs", f"{cfg.EVAL_NAME}__{int(time.time())}")
        numbered = (Path(f"{base}_{i}") for i in itertools.count(2))
        cfg.output_dir = str(next(p for p in itertools.chain([base], numbered) if not p.exists()))
    out = Path(cfg.output_dir).expanduser()
    check_output_dir(out)
    held = _check_no_evaluation(out, cfg.overwrite)
    if held:
        print(f"--overwrite: replacing the evaluation in {out}: {', '.join(held)} (once this one is written)", flush=True)
    return out


def _check_no_evaluation(out: Path, overwrite: bool) -> list[str]:
    """The files of an evaluation ``out`` holds (:data:`EVAL_FILES`); refused unless ``overwrite``."""
    held = [name for name in EVAL_FILES if (out / name).exists()]
    if held and not overwrite:
        raise RunDirError(f"--output_dir {out} holds an evaluation already ({', '.join(held)}); give another "
                          "--output_dir, or --overwrite to replace it")
    return held


@contextlib.contextmanager
def _claimed(out: Path, overwrite: bool) -> Iterator[None]:
    """Hold ``out``'s lock (:class:`grpo_seq.io.run_dir.RunLock`, as a training run does) while the
    evaluation generates and writes, checking again under it that no other evaluation wrote there
    meanwhile. A folder made here and left empty (the evaluation failed) is removed again."""
    made = not out.exists()
    lock = RunLock(out).acquire()
    try:
        _check_no_evaluation(out, overwrite)
        yield
    finally:
        lock.release()
        if made and not any(out.iterdir()):
            out.rmdir()


def _write_results(out: Path, result: dict, records: list[dict]) -> None:
    """completions.jsonl, then eval.json (so a complete eval.json means complete completions); eval.json printed."""
    atomic_write_text(out / "completions.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    atomic_write_text(out / "eval.json", json.dumps(result, indent=2))
    print(json.dumps(result))
