"""Run a language model's job (:class:`grpo_seq.jobs.lm_spec.LMJob`) on a prompt dataset and
reward functions.

The dataset is in TRL's format (a ``prompt`` column: a string, or a list of chat messages; every
other column reaches the reward functions as a keyword argument) or names its columns
(``prompt_column``, ``answer_column``); JSONL, JSON, parquet, CSV, a folder written by
``save_to_disk`` or a hub id. Reward functions have TRL's signature
``fn(prompts, completions, **columns) -> list[float | None]`` and are named by import path
(``package.module:function``). The command line (``grpo-seq train-lm``), the recipes and the
TRL-style trainer all build their runs here.

Writes <output_dir>/{config.json (the spec), metrics.jsonl, completions/step_XXXX.jsonl,
summary.json, model/, checkpoints/}; says the expected time after the first step, and the peak
memory and the run folder's disk use at the end. SIGTERM or Ctrl-C finishes the current step,
writes a checkpoint and prints the command that resumes it.
"""

from __future__ import annotations

import json
import os
import resource
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

from ..io.disk import disk_use_line
from ..errors import ConfigError
from ..io.memory import retain_freed_memory
from ..io.models import count_parameters, load_model_and_tokenizer
from ..io.plot import plot_run_if_possible
from ..policies import CausalLMPolicy
from ..io.prompt_data import prompt_rows, read_rows
from ..sampling.curriculum import Curriculum
from ..scoring.constant_baseline import ConstantBaseline
from ..scoring.rewards import RewardScorer
from ..sampling import LMGroupSampler
from ..io.serialization import atomic_write_text
from ..loop.stopping import GracefulStop, any_process, checkpoint_on_error, max_over_processes
from ..io.tracking import tracker_kwargs
from ..loop.trainer import GRPOLoop
from .budget import shrink
from ..loop.cpu_share import IdleCores, usable_cores
from .callbacks import CallbackList, JobCallbacks, Progress, as_callbacks
from .folder import resolve_run_dir
from ..scoring.heldout import HeldOutSet
from .heldout import HeldOutEval
from .lm_spec import LMJob

__all__ = ["LMRun", "run_lm_job", "build", "prepare_model", "train", "load_prompts", "apply_lora", "dataset_name",
           "setup_process", "make_accelerator", "write_completions", "finish", "open_run_dir", "load_heldout_rows",
           "heldout_callbacks"]


@dataclass
class LMRun:
    """One training run's parts, built and checked, ready for :func:`train`."""

    spec: LMJob
    trainer: GRPOLoop
    scorer: RewardScorer
    accelerator: Accelerator
    num_prompts: int
    label: str = "lm"
    say: Callable[[str], None] = field(default=lambda text: None, repr=False)  # where the run's lines go
    last_metrics: dict[str, float] = field(default_factory=dict, repr=False)
    quick: str | None = None  # GRPO_SEQ_QUICK's line, when it shrank the budget
    cores: IdleCores | None = field(default=None, repr=False)  # torch_threads 0 on CPU: threads follow the idle cores
    curriculum: Curriculum | None = field(default=None, repr=False)  # a dataset with stages: which one is drawn

    def adapt_threads(self) -> None:
        """Before a step: as many torch threads as this process's share of the cores that other work
        left idle over the last step (:mod:`grpo_seq.loop.cpu_share`: a thread sharing a busy core makes
        every operation wait for it)."""
        if self.cores is not None:
            n = self.cores.threads()
            if n != torch.get_num_threads():
                torch.set_num_threads(n)

    def describe(self) -> str:
        """One line: the model's size, the share trained, the prompts and the rewards."""
        trainable, total = count_parameters(self.trainer.policy.model)
        return (f"{self.spec.model}: {total / 1e6:.1f}M parameters, {trainable / 1e6:.2f}M trained; "
                f"{self.num_prompts} prompts; rewards {self.scorer}")

    @property
    def cfg(self) -> LMJob:
        return self.spec

    def write_completions(self, path: Path, batch: Any) -> str:
        """The step's completions log (:func:`write_completions`); returns what the console shows."""
        return write_completions(path, batch, self.scorer.names)

    @property
    def is_main_process(self) -> bool:
        return self.accelerator.is_main_process

    def sample_rows(self, rows: Any, num_generations: int, batch_size: int,
                    generation: dict[str, Any] | None = None) -> Any:
        """``num_generations`` completions (at least 2) of every one of ``rows``, in order, from the
        policy as it is now with the run's sampling settings (``generation``: more ``generate``
        options); rewards are not scored. For evaluation: no gradient, the policy in eval mode."""
        cfg, policy = self.spec, self.trainer.policy
        sampler = LMGroupSampler(policy.tokenizer, rows, len(rows), num_generations, cfg.max_completion_length,
                                 temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                                 generation_batch_size=batch_size, seed=cfg.seed, shuffle=False)
        sampler.sampling.update(generation or {})
        was_training = policy.training
        policy.eval()
        try:
            with torch.no_grad(), self.accelerator.autocast():
                return sampler.sample(policy)
        finally:
            policy.train(was_training)

    def progress(self) -> Progress:
        m = self.last_metrics
        return Progress(self.trainer.step_count, self.spec.max_steps, "step",
                        _postfix(m, self.scorer.names) if m else {})


def dataset_name(dataset: Any) -> str:
    """A short name for run folders: ``org/name`` -> ``name``, ``data/math/train.jsonl`` -> ``math-train``."""
    if not isinstance(dataset, (str, Path)):
        return "dataset"
    path = Path(dataset)
    if path.suffix:
        return f"{path.parent.name}-{path.stem}" if path.parent.name else path.stem
    return str(dataset).rstrip("/").split("/")[-1].replace(":", "-")  # reasoning_gym:TASK -> reasoning_gym-TASK


def load_prompts(cfg: LMJob) -> Any:
    """The dataset's rows as prompts (:func:`grpo_seq.io.prompt_data.prompt_rows`), each checked now."""
    if cfg.dataset is None:
        raise ConfigError("--dataset: give the prompts, a .jsonl/.json/.parquet/.csv file, a save_to_disk folder or "
                          "a hub id (a 'prompt' column, or name it with --prompt_column)")
    return prompt_rows(read_rows(cfg.dataset, cfg.dataset_split, cfg.dataset_config), cfg.prompt_column,
                       cfg.answer_column, cfg.system_prompt, cfg.instruction, cfg.as_chat, source=f"--dataset {cfg.dataset}")


def load_heldout_rows(cfg: LMJob, scorer: RewardScorer) -> Any:
    """``--eval_dataset``'s rows as prompts, each checked against the reward functions now, or
    None without a held-out evaluation; ``--eval_metric`` must name one of the functions."""
    if not cfg.heldout:
        return None
    source = f"--eval_dataset {cfg.eval_dataset}"
    rows = prompt_rows(read_rows(cfg.eval_dataset, cfg.eval_dataset_split, cfg.eval_dataset_config), cfg.prompt_column,
                       cfg.answer_column, cfg.system_prompt, cfg.instruction, cfg.as_chat, source=source)
    scorer.check_dataset(rows, source=source)
    if cfg.eval_metric is not None and cfg.eval_metric not in scorer.names:
        raise ConfigError(f"--eval_metric: no reward function {cfg.eval_metric!r}; the run's are "
                          f"{', '.join(scorer.names)}")
    return rows


def heldout_callbacks(cfg: LMJob, rows: Any, scorer: RewardScorer) -> list[JobCallbacks]:
    """The held-out evaluation's callback (:mod:`grpo_seq.jobs.heldout`) over the first
    ``eval_size`` of ``rows`` (the budget as ``GRPO_SEQ_QUICK`` left it), or none."""
    if rows is None or not cfg.heldout:
        return []
    heldout = HeldOutSet(rows[: cfg.eval_size], scorer, cfg.eval_metric or scorer.names[0], cfg.eval_answer_format,
                         cfg.eval_max_new_tokens or cfg.max_completion_length)
    return [HeldOutEval(heldout, cfg.output_dir)]


def apply_lora(model: torch.nn.Module, peft_config: Any) -> torch.nn.Module:
    """``get_peft_model``, without the FutureWarning peft's own check of a deprecated transformers
    property prints on every run (nothing the caller can change)."""
    from peft import get_peft_model

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, peft_config)


def _lora_config(cfg: LMJob) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=cfg.lora_target_modules, task_type="CAUSAL_LM")


def idle_cores() -> IdleCores:
    """The measure of idle cores for this process's share of the machine (:mod:`grpo_seq.loop.cpu_share`)."""
    return IdleCores(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def setup_process(cfg: LMJob) -> None:
    """Threads, global seeds and (with ``retain_freed_memory``) malloc: a program's whole process."""
    # accelerate launch leaves each process one thread (OMP_NUM_THREADS=1); a small model wants
    # every core: share them among this machine's processes (usable_cores says which count).
    local_procs = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(cfg.torch_threads or max(1, usable_cores() // local_procs))
    set_seed(cfg.seed)
    if cfg.retain_freed_memory:
        retain_freed_memory()


def make_accelerator(cfg: LMJob) -> Accelerator:
    # Several processes and no GPU: gloo on CPU (accelerate would otherwise start each process alone).
    multi_cpu = not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1
    return Accelerator(cpu=cfg.use_cpu or multi_cpu, mixed_precision="bf16" if cfg.bf16 else "no",
                       **tracker_kwargs(cfg.report_to, cfg.output_dir))


def build(cfg: LMJob, rows: Any, scorer: RewardScorer, model: torch.nn.Module, tokenizer: Any,
          accelerator: Accelerator, peft_config: Any = None, label: str = "lm", cores: IdleCores | None = None,
          make_sampler: Callable[..., Any] | None = None, generation_options: dict[str, Any] | None = None) -> LMRun:
    """The policy (LoRA from ``peft_config`` or ``--use_peft``), the sampler and the trainer.

    With LoRA the reference is the same model with its adapters disabled. ``GRPO_SEQ_QUICK``
    shrinks the spec's budget first (:mod:`grpo_seq.jobs.budget`). ``make_sampler(cfg, rows,
    model, tokenizer, accelerator)`` builds another sampler than :class:`LMGroupSampler` (the TRL
    door's tool-calling conversations); ``generation_options`` go to every ``generate`` call beside
    temperature, top_p and top_k (``min_p``, ``repetition_penalty``, ...)."""
    quick = shrink(cfg)
    model = prepare_model(cfg, model, peft_config)
    if make_sampler is not None:
        sampler = make_sampler(cfg, rows, model, tokenizer, accelerator)
    else:  # each process draws its own share of every step's prompts
        sampler = LMGroupSampler(
            tokenizer, rows, cfg.num_groups, cfg.num_generations, cfg.max_completion_length,
            temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
            generation_batch_size=cfg.generation_batch_size, seed=cfg.seed, shuffle=cfg.shuffle_prompts,
            process_index=accelerator.process_index, num_processes=accelerator.num_processes,
            max_context_length=getattr(model.config, "max_position_embeddings", None),
            sampler_logprobs=cfg.sampler_correction is not None,  # the importance weights need the sampler's log-probs
        )
    sampler.sampling.update(generation_options or {})
    policy = CausalLMPolicy(model, tokenizer, sampling_dtype=cfg.sampling_dtype)
    score_fn = (ConstantBaseline(scorer, rows, cfg.constant_baseline_items, cfg.seed) if cfg.constant_baseline_items
                else scorer)
    trainer = GRPOLoop(cfg, policy, sampler, accelerator, score_fn=score_fn)
    if cfg.torch_threads != 0 or accelerator.device.type != "cpu":
        cores = None
    elif cores is None:
        cores = idle_cores()
    curriculum = curriculum_of(cfg, rows)
    if curriculum is not None:
        if not hasattr(sampler, "draw_from"):
            raise ConfigError("--curriculum_threshold: this program's sampler draws its own prompts")
        sampler.draw_from(curriculum.rows(), stage=curriculum.stage)
    return LMRun(cfg, trainer, scorer, accelerator, len(rows), label, quick=quick, cores=cores, curriculum=curriculum)


def curriculum_of(cfg: LMJob, rows: Any) -> Curriculum | None:
    """With ``--curriculum_threshold``, the rows' stages (their ``stage`` column); else None."""
    if cfg.curriculum_threshold is None:
        return None
    if "stage" not in rows[0]:
        raise ConfigError(f"--curriculum_threshold: the rows of --dataset {cfg.dataset} have no 'stage' column (a "
                          "number per row, lower is easier) to draw them by")
    try:
        return Curriculum([row["stage"] for row in rows], cfg.curriculum_threshold, cfg.curriculum_window)
    except ValueError as e:
        raise ConfigError(f"--curriculum_threshold: --dataset {cfg.dataset} {e}") from None


def _follow_curriculum(lm: LMRun, m: dict[str, float]) -> None:
    """After a step: record its metric; when that opens the next stage, draw from it and say so."""
    c = lm.curriculum
    if c.observe(m.get(f"reward/{lm.spec.eval_metric or lm.scorer.names[0]}")):
        lm.trainer.sampler.draw_from(c.rows(), stage=c.stage)
        lm.say(f"curriculum: stage {c.stage} ({c.current + 1} of {len(c.levels)}) from step {lm.trainer.step_count + 1}")


def prepare_model(cfg: LMJob, model: torch.nn.Module, peft_config: Any = None) -> torch.nn.Module:
    """The model as the spec trains it: gradient checkpointing, LoRA from ``peft_config`` or ``--use_peft``."""
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if peft_config is None and cfg.use_peft:
        peft_config = _lora_config(cfg)
    return apply_lora(model, peft_config) if peft_config is not None else model


@dataclass
class _Starting:
    """What the callbacks hear of a run before it is built (while the model loads)."""

    accelerator: Accelerator
    label: str

    @property
    def is_main_process(self) -> bool:
        return self.accelerator.is_main_process


def open_run_dir(spec: LMJob, callbacks: CallbackList, name: str) -> None:
    """Settle the run folder (default ``runs/{name}__{seed}__{unix time}``) and tell ``callbacks``;
    refuse a spec without a model."""
    spec.output_dir = resolve_run_dir(spec, f"runs/{name}__{spec.seed}__{int(time.time())}")
    callbacks.on_run_dir(Path(spec.output_dir))
    if spec.model is None:
        raise ConfigError("--model: give a hub id, a local folder or a .gguf file (the library has no default "
                          "model; the recipes have theirs)")


def run_lm_job(spec: LMJob, callbacks: JobCallbacks | Sequence[JobCallbacks] | None = None,
               reward_funcs: Sequence[Callable | str] | None = None, registry: Mapping[str, Callable] | None = None,
               label: str = "lm") -> dict:
    """Load, check, build and train one run from its spec; returns the summary.

    ``callbacks`` hear the run (:class:`JobCallbacks`). ``reward_funcs``: the functions (default:
    ``spec.reward_fns``, loaded by name from ``registry`` or by import path). Changes the whole
    process, as a program does: seeds the global RNGs, sets torch's thread count and, with
    ``retain_freed_memory``, malloc."""
    cbs = as_callbacks(callbacks)
    try:
        open_run_dir(spec, cbs, f"{label}__{dataset_name(spec.dataset)}")
        fns = list(reward_funcs or spec.reward_fns)
        if not fns:
            raise ConfigError("--reward_funcs: give at least one reward function (package.module:function)")
        setup_process(spec)
        accelerator = make_accelerator(spec)
        cbs.on_message(_Starting(accelerator, label), f"loading the prompts, checking the rewards, loading {spec.model}")
        rows = load_prompts(spec)
        scorer = RewardScorer(fns, spec.reward_weights, registry)
        scorer.check_dataset(rows, source=f"--dataset {spec.dataset}")  # every row and signature, before the model loads
        curriculum_of(spec, rows)  # its stages, checked before the model loads
        eval_rows = load_heldout_rows(spec, scorer)
        cores = idle_cores()  # measured from here: the model's load is the first interval
        model, tokenizer = load_model_and_tokenizer(spec.model, spec.dtype, spec.trust_remote_code)
        lm = build(spec, rows, scorer, model, tokenizer, accelerator, label=label, cores=cores)
        return train(lm, [*heldout_callbacks(spec, eval_rows, scorer), cbs])
    finally:
        cbs.close()


def train(lm: LMRun, callbacks: JobCallbacks | Sequence[JobCallbacks] | None = None) -> dict:
    """The training loop: resume when asked, step to ``max_steps``, checkpoint, save ``model/``,
    summarise. A callback's ``on_step`` returning True stops the run after that step (saved as at the end)."""
    cbs = as_callbacks(callbacks)
    cfg, trainer, acc = lm.spec, lm.trainer, lm.accelerator
    out = Path(cfg.output_dir)
    state = trainer.resume(cfg.resume_from) if cfg.resume_from else {}
    start = time.perf_counter() - state.get("elapsed", 0.0)
    history = _history_before(out, resumed=bool(state))
    lm.say = lambda text: cbs.on_message(lm, text)

    if lm.curriculum is not None and "curriculum" in state:  # the sampler's order, restored, is the stage's
        lm.curriculum.load_state_dict(state["curriculum"])
        trainer.sampler.draw_from(lm.curriculum.rows(), restart=False, stage=lm.curriculum.stage)

    def loop_state() -> dict:
        extra = {"curriculum": lm.curriculum.state_dict()} if lm.curriculum is not None else {}
        return {"elapsed": time.perf_counter() - start, **extra}

    cbs.on_start(lm)
    sampler = trainer.sampler
    if hasattr(sampler, "status"):  # the first step can take minutes: say what it is doing
        sampler.status = lambda text: cbs.on_status(lm, f"step {trainer.step_count + 1}: {text}")
    lm.say(lm.describe())
    if lm.quick:
        lm.say(lm.quick)
    if trainer.resumed_from is not None:
        lm.say(f"resumed from {trainer.resumed_from}: step {trainer.step_count} of {cfg.max_steps}")
    if cfg.max_steps == 0:
        return _evaluate_only(lm, cbs)
    first = trainer.step_count
    with GracefulStop() as stop, checkpoint_on_error(trainer, loop_state, cfg.output_dir):
        while trainer.step_count < cfg.max_steps:
            t0 = time.perf_counter()
            lm.adapt_threads()
            m = lm.last_metrics = trainer.step(progress=_progress(lm, start))
            if lm.curriculum is not None:
                _follow_curriculum(lm, m)
            history.append(m)
            if trainer.step_count == first + 1:
                lm.say(_estimate(time.perf_counter() - t0, cfg.max_steps - trainer.step_count))
            _maybe_write_completions(lm, out)
            stop_asked = cbs.on_step(lm, m)
            path = trainer.maybe_save_checkpoint(loop_state)
            if path is not None:
                cbs.on_checkpoint(lm, path)
            if stop.agreed(acc):
                cbs.close()
                stop.checkpoint_and_exit(trainer, loop_state, cfg.output_dir)
            if stop_asked or _out_of_time(lm, start):
                break
    summary = finish(lm, history, time.perf_counter() - start, loop_state)
    cbs.on_end(lm, summary)
    if acc.is_main_process and "heldout" in summary:  # what the held-out evaluation added
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
    return summary


def _progress(lm: LMRun, start: float) -> float:
    """The share of the run done, for the learning-rate schedule: of ``max_steps``, or of
    ``--max_minutes`` where that comes first (the same on every process, so their weights stay equal)."""
    done = lm.trainer.step_count / lm.spec.max_steps
    if lm.spec.max_minutes:
        elapsed = max_over_processes(time.perf_counter() - start, lm.accelerator)
        done = max(done, elapsed / (60 * lm.spec.max_minutes))
    return min(done, 1.0)


def _out_of_time(lm: LMRun, start: float) -> bool:
    """Whether ``--max_minutes`` has passed (every process agrees); says so once."""
    limit = lm.spec.max_minutes
    if not limit or not any_process(time.perf_counter() - start >= 60 * limit, lm.accelerator):
        return False
    lm.say(f"--max_minutes {limit:g} reached after step {lm.trainer.step_count} of {lm.spec.max_steps}: stopping")
    return True


def _evaluate_only(lm: LMRun, cbs: JobCallbacks) -> dict:
    """``max_steps 0``: no step and no model saved; the run folder holds config.json, the held-out
    evaluation (the callbacks') and summary.json."""
    trainer = lm.trainer
    trainer.start_run()
    summary = {"model": lm.cfg.model, "steps": 0}
    cbs.on_end(lm, summary)
    if lm.is_main_process:
        atomic_write_text(Path(lm.cfg.output_dir) / "summary.json", json.dumps(summary, indent=2))
    trainer.close()
    return summary


def _history_before(out: Path, resumed: bool) -> list[dict]:
    """The steps before a resume, as logged (resume() dropped any row after the checkpoint)."""
    metrics_file = out / "metrics.jsonl"
    if not (resumed and metrics_file.exists()):
        return []
    rows = [json.loads(ln) for ln in metrics_file.read_text().splitlines() if ln.strip()]
    return [h for h in rows if "reward/mean" in h]


def _postfix(m: dict, names: Sequence[str]) -> dict:
    shown = {"reward": f"{m['reward/mean']:.2f}"}
    shown.update({n.removesuffix("_reward")[:12]: f"{m.get(f'reward/{n}', float('nan')):.2f}" for n in names[:2] if len(names) > 1})
    shown.update(len=f"{m['policy/completion_length']:.0f}", kl=f"{m['policy/kl']:.4f}",
                 tok_s=f"{m['perf/tokens_per_second']:.0f}")
    return shown


def _estimate(seconds: float, steps_left: int) -> str:
    """Said after the first step: what the rest will take at that pace, and the memory so far."""
    return (f"first step: {seconds:.1f} s; expect about {seconds:.1f} s a step, {_duration(seconds * steps_left)} "
            f"for the {steps_left} steps left; {_peak_memory()}")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _peak_memory() -> str:
    line = f"peak memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB (RSS)"
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        line += f", {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB on the GPU"
    return line


def _maybe_write_completions(lm: LMRun, out: Path) -> None:
    step, every = lm.trainer.step_count, lm.spec.log_completions_every
    if lm.is_main_process and every and (step % every == 0 or step == 1):
        shown = lm.write_completions(out / "completions" / f"step_{step:04d}.jsonl", lm.trainer.last_batch)
        lm.say(f"step {step}:\n{shown}")


def write_completions(path: Path, batch: Any, names: list[str]) -> str:
    """One JSON line per completion; returns the first group's first, readable, for the console."""
    comps = batch.reward_components.tolist()
    rows, G = [], batch.num_generations
    for i, text in enumerate(batch.text.completion_texts):
        prompt = batch.text.prompts[i]
        rows.append({
            "group": i // G,
            "prompt": (prompt if isinstance(prompt, str) else prompt[-1]["content"]) if i % G == 0 else None,
            "completion": text,
            "rewards": {n: (None if c != c else c) for n, c in zip(names, comps[i])},
            "reward": float(batch.rewards[i]),
            "advantage": float(batch.advantages[i][batch.mask[i]].mean()) if batch.mask[i].any() else 0.0,
            "truncated": bool(batch.truncated[i]),
        })
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
    first = rows[0]
    return f"Q: {first['prompt']}\nA: {first['completion']}\n   rewards {first['rewards']}, advantage {first['advantage']:+.2f}"


def finish(lm: LMRun, history: list[dict], seconds: float, loop_state: Callable[[], dict]) -> dict:
    """Checkpoint, save ``model/`` (sharing the checkpoint's weight files), write and print the summary."""
    cfg, trainer, acc = lm.cfg, lm.trainer, lm.accelerator
    out = Path(cfg.output_dir)
    trainer.save_checkpoint(loop_state)
    trainer.save(out / "model", merged=cfg.save_merged)
    summary = _summary(lm, history, seconds)
    if acc.is_main_process:
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
        lm.say(json.dumps(summary))
        curves = plot_run_if_possible(out, out / "curves.png", warn=lm.say)
        if curves:
            lm.say(f"learning curves: {curves}")
        stepped = [h["perf/step_seconds"] for h in history if "perf/step_seconds" in h]  # as the first step's line
        lm.say(f"{_peak_memory()}" + (f"; {sum(stepped) / len(stepped):.1f} s a step over {len(stepped)} step{'s' * (len(stepped) != 1)}"
                                     if stepped else ""))
    trainer.close()  # releases the run folder's lock file: the disk use below is what stays
    if acc.is_main_process:
        lm.say(disk_use_line(out))
    return summary


def _summary(lm: LMRun, history: list[dict], seconds: float) -> dict:
    trainer = lm.trainer

    def mean_of(key: str, part: list[dict]) -> float | None:
        vals = [h[key] for h in part if key in h]
        return sum(vals) / len(vals) if vals else None

    k = max(1, min(5, len(history) // 2))
    keys = ["reward/mean", *(f"reward/{n}" for n in lm.scorer.names)]
    label = {key: "reward" if key == "reward/mean" else key.split("/", 1)[1] for key in keys}
    return {
        "model": lm.cfg.model,
        "steps": trainer.step_count,
        "seconds": seconds,
        "seconds_per_step": seconds / max(1, trainer.step_count),
        "completion_tokens": trainer.tokens_sampled,
        "completion_tokens_per_second": trainer.tokens_sampled / seconds,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "peak_gpu_gib": (torch.cuda.max_memory_allocated() / 2**30
                         if torch.cuda.is_available() and torch.cuda.is_initialized() else None),
        **{f"{label[key]}_first_{k}_steps": mean_of(key, history[:k]) for key in keys},
        **{f"{label[key]}_last_{k}_steps": mean_of(key, history[-k:]) for key in keys},
        "num_processes": lm.accelerator.num_processes,
    }
