"""``GRPOConfig`` under TRL's names, mapped onto :class:`grpo_seq.jobs.lm_spec.LMJob`.

Every option of TRL 1.16's ``GRPOConfig`` is accepted (:data:`grpo_seq.trl.trl_options.TRL_DEFAULTS`).
The defaults are TRL's, except ``gradient_checkpointing`` (False: on a CPU memory is rarely the
limit, and recomputing costs a third more time), ``bf16`` (None: on where a CUDA GPU supports it,
as TRL does, off elsewhere rather than refused) and ``output_dir`` (None: a new folder under
``runs/``). An option is either implemented with TRL's meaning, passed to the field of the same
name of grpo-seq's core config where that has one, accepted at any value where it changes nothing
on one process (:data:`NO_EFFECT`), or accepted at TRL's default and refused by name at any other
value, with the reason (:data:`REFUSED`). docs/guides/trl.md holds the table.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, fields
from typing import Any

from ..errors import ConfigError, UsageError
from .trl_options import TRL_DEFAULTS

__all__ = ["GRPOConfig", "NO_EFFECT", "REFUSED", "LOSS_TYPES"]

# TRL's loss_type -> ours, where grpo-seq's core does not have TRL's name itself.
LOSS_TYPES = {"dapo": "bnpo", "bnpo": "bnpo", "grpo": "grpo", "dr_grpo": "dr_grpo"}

# TRL's vllm_importance_sampling_mode values (grpo-seq's importance_sampling_correction modes).
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")

_VLLM = "vLLM needs a CUDA GPU; grpo-seq samples with transformers' generate (a cheaper copy: sampling_dtype)"
_HUB = "grpo-seq does not push to the hub; upload <output_dir>/model with huggingface_hub"
_GPU = "a GPU-only feature"
_DIST = "one process here; grpo-seq's own multi-process runs use accelerate launch (docs/guides/distributed.md)"
_SCHED = "grpo-seq's schedule is lr_scheduler_type linear or constant, without warm-up"
_GEN = "grpo-seq's sampler keeps transformers' own KV cache"
# TRL options accepted at TRL's default only, and why another value is refused.
REFUSED: dict[str, str] = {
    **{k: _VLLM for k in TRL_DEFAULTS if k.startswith("vllm_") and not k.startswith("vllm_importance_sampling")},
    "use_vllm": _VLLM, "push_to_hub": _HUB, "hub_model_id": _HUB, "hub_strategy": _HUB, "hub_token": _HUB,
    "hub_private_repo": _HUB, "hub_always_push": _HUB, "hub_revision": _HUB, "log_completions_hub_repo": _HUB,
    "use_liger_kernel": _GPU, "liger_kernel_config": _GPU, "fp16": _GPU, "fp16_full_eval": _GPU,
    "use_transformers_paged": _GPU, "use_transformers_continuous_batching": _GPU,
    "transformers_continuous_batching_config": _GPU, "cache_implementation": _GEN, "torch_compile": _GPU,
    "deepspeed": _DIST, "fsdp": _DIST, "fsdp_config": _DIST, "parallelism_config": _DIST,
    "ds3_gather_for_generation": _DIST, "warmup_steps": _SCHED, "lr_scheduler_kwargs": _SCHED,
    "optim_args": "grpo-seq's optimizer is AdamW", "optim_target_modules": "grpo-seq's optimizer is AdamW",
    "cast_lm_head_to_fp32": "the weights are float32 already unless model_init_kwargs asks for bfloat16",
    "load_best_model_at_end": "grpo-seq keeps the last model", "metric_for_best_model": "grpo-seq keeps the last model",
    "label_smoothing_factor": "GRPO has no labels", "neftune_noise_alpha": "not in grpo-seq",
    "auto_find_batch_size": "not in grpo-seq", "router_aux_loss_coef": "mixture-of-experts auxiliary loss: not in grpo-seq",
    "activation_checkpointing": "use gradient_checkpointing", "activation_checkpointing_kwargs": "use gradient_checkpointing",
    "gradient_checkpointing_kwargs": "grpo-seq checkpoints with transformers' defaults",
    "torch_empty_cache_steps": _GPU, "enable_jit_checkpoint": "not in grpo-seq", "full_determinism": "not in grpo-seq",
    "data_seed": "grpo-seq draws prompts from seed", "use_cache": "grpo-seq sets the KV cache itself",
}
# TRL options with no effect on one CPU process (logging, data-loader workers, DDP, hub labels):
# accepted at any value and kept on the config, as TrainingArguments keeps them.
NO_EFFECT = frozenset({
    "average_tokens_across_devices", "bf16_full_eval", "tf32", "torch_compile_backend",
    "torch_compile_mode", "logging_strategy", "logging_first_step", "log_on_each_node", "logging_nan_inf_filter",
    "include_num_input_tokens_seen", "log_level", "log_level_replica", "disable_tqdm", "run_name", "project",
    "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id", "eval_delay", "prediction_loss_only",
    "eval_do_concat_batches", "eval_use_gather_object", "eval_accumulation_steps", "include_for_metrics",
    "batch_eval_metrics", "save_on_each_node", "greater_is_better", "ignore_data_skip",
    "restore_callback_states_from_checkpoint", "accelerator_config", "dataloader_drop_last",
    "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers", "dataloader_prefetch_factor",
    "dataloader_multiprocessing_context", "dataloader_in_order", "label_names", "train_sampling_strategy",
    "length_column_name", "ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers", "ddp_static_graph",
    "ddp_backend", "ddp_timeout", "debug", "skip_memory_metrics", "do_train", "do_eval", "do_predict",
    "resume_from_checkpoint", "local_rank", "pad_to_multiple_of", "num_completions_to_print", "log_unique_prompts",
    "log_multimodal",
})


@dataclass(init=False)
class GRPOConfig:
    """TRL's ``GRPOConfig`` for :class:`grpo_seq.trl.GRPOTrainer`: every TRL 1.16 option, with
    TRL's meaning (the table in docs/guides/trl.md). A name TRL does not have, and a TRL option
    grpo-seq cannot apply set to other than TRL's default, are refused by name
    (:class:`grpo_seq.errors.UsageError`)."""

    output_dir: str | None = None
    per_device_train_batch_size: int = 8  # completions per device per optimizer step
    gradient_accumulation_steps: int = 1
    num_generations: int = 8
    max_completion_length: int = 512
    max_steps: int = -1
    num_train_epochs: float = 3.0
    learning_rate: float = 1e-6
    lr_scheduler_type: str = "linear"
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: float | None = None
    num_iterations: int = 1
    loss_type: str = "dapo"
    scale_rewards: Any = "group"
    reward_weights: list[float] | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    shuffle_dataset: bool = True
    remove_unused_columns: bool = False
    seed: int = 42
    bf16: bool | None = None
    gradient_checkpointing: bool = False
    logging_steps: float = 10
    log_completions: bool = False
    save_strategy: str = "steps"
    save_steps: float = 500
    save_total_limit: int | None = None
    save_only_model: bool = False
    report_to: Any = "none"
    use_cpu: bool = False
    trust_remote_code: bool = False
    model_init_kwargs: dict | None = None
    sync_ref_model: bool = False
    ref_model_mixup_alpha: float = 0.6
    ref_model_sync_steps: int = 512
    # evaluation, as TRL's: every eval_steps optimizer steps (eval_strategy "steps") or at each epoch's end
    eval_strategy: str = "no"
    eval_steps: float | None = None
    eval_on_start: bool = False
    per_device_eval_batch_size: int = 8
    num_generations_eval: int | None = None
    steps_per_generation: int | None = None  # default gradient_accumulation_steps
    generation_batch_size: int | None = None  # default per_device_train_batch_size x steps_per_generation
    disable_dropout: bool = False
    optim: str = "adamw_torch_fused"
    # sampling beyond temperature/top_p/top_k: given to generate (transformers' generate where
    # grpo-seq's own sampling loop does not implement them); chat_template_kwargs to apply_chat_template
    min_p: float | None = None
    repetition_penalty: float = 1.0
    generation_kwargs: dict | None = None
    chat_template_kwargs: dict | None = None
    # GRPOTrainer(tools=..., environment_factory=...): most rounds of tool calls per conversation (None: no limit
    # but max_completion_length, which counts the tools' results too)
    max_tool_calling_iterations: int | None = None
    # TRL corrects vLLM's samples; here they correct those of a cheaper sampling copy (sampling_dtype)
    vllm_importance_sampling_correction: bool = True
    vllm_importance_sampling_mode: str = "sequence_mask"
    vllm_importance_sampling_clip_max: float | None = 3.0
    vllm_importance_sampling_clip_min: float | None = None
    vllm_importance_sampling_cap: float | None = None  # TRL's deprecated name of clip_max
    # grpo-seq's own
    overwrite: bool = False
    micro_batch_size: int | None = None
    sampling_dtype: str = "float32"
    constant_baseline_items: int = 0  # LMJob's: no constant answer earns more than 0 (scoring/constant_baseline.py)

    def __init__(self, **kwargs: Any) -> None:
        names = [f.name for f in fields(self)]
        for key in kwargs:
            if key not in names and key not in TRL_DEFAULTS:
                close = difflib.get_close_matches(key, [*names, *TRL_DEFAULTS], n=1)
                raise UsageError(f"GRPOConfig: unknown option {key!r}" + (f"; did you mean {close[0]!r}?" if close else
                                 "; docs/guides/trl.md lists the options"))
        for f in fields(self):
            setattr(self, f.name, kwargs.get(f.name, f.default))
        self._trl_only = {k: kwargs.get(k, v) for k, v in TRL_DEFAULTS.items() if k not in names}
        for key, value in self._trl_only.items():
            setattr(self, key, value)
        self._refuse_non_defaults()
        self.accelerator_config = _accelerator_config(self.accelerator_config)
        self._check()

    def _refuse_non_defaults(self) -> None:
        """A TRL option that grpo-seq cannot apply is refused at any value but TRL's default."""
        from ..jobs.lm_spec import LMJob

        core = {f.name for f in fields(LMJob)} | MAPPED
        for key, value in self._trl_only.items():
            if key in core or key in NO_EFFECT or _same(value, TRL_DEFAULTS[key]):
                continue
            why = REFUSED.get(key, "not in grpo-seq")
            raise UsageError(f"GRPOConfig: {key}={value!r} is a TRL option grpo-seq cannot apply here ({why}); "
                             f"leave it at TRL's default {TRL_DEFAULTS[key]!r} (docs/guides/trl.md)")

    def _check(self) -> None:
        from ..loop.config import LOSS_TYPES as CORE_LOSS_TYPES  # the core config validates against these

        if self.loss_type not in LOSS_TYPES and self.loss_type not in CORE_LOSS_TYPES:
            raise ConfigError(f"GRPOConfig.loss_type: grpo-seq has {sorted({*LOSS_TYPES, *CORE_LOSS_TYPES})}, "
                              f"got {self.loss_type!r}")
        if self.scale_rewards not in (True, False, "group", "none", "batch"):
            raise ConfigError(f"GRPOConfig.scale_rewards: must be 'group', 'batch', 'none' (or True/False), "
                              f"got {self.scale_rewards!r}")
        if self.lr_scheduler_type not in ("linear", "constant"):
            raise ConfigError(f"GRPOConfig.lr_scheduler_type: grpo-seq has 'linear' and 'constant', got {self.lr_scheduler_type!r}")
        if not str(self.optim).startswith("adamw_torch"):
            raise ConfigError(f"GRPOConfig.optim: grpo-seq's optimizer is AdamW (adamw_torch, adamw_torch_fused), "
                              f"got {self.optim!r}")
        if self.save_strategy not in ("steps", "no"):
            raise ConfigError(f"GRPOConfig.save_strategy: grpo-seq has 'steps' and 'no', got {self.save_strategy!r}")
        if self.eval_strategy not in ("no", "steps", "epoch"):
            raise ConfigError(f"GRPOConfig.eval_strategy: must be 'no', 'steps' or 'epoch', got {self.eval_strategy!r}")
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_iterations",
                     "per_device_eval_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"GRPOConfig.{name}: must be >= 1, got {getattr(self, name)}")
        self._check_generation_batch()
        self._check_importance_sampling()
        if self.model_init_kwargs and set(self.model_init_kwargs) - {"dtype", "torch_dtype", "revision"}:
            raise ConfigError(f"GRPOConfig.model_init_kwargs: grpo-seq reads dtype and revision, got {sorted(self.model_init_kwargs)}")

    def _check_generation_batch(self) -> None:
        """TRL's generation batch: per_device_train_batch_size x steps_per_generation completions
        (or generation_batch_size), a multiple of num_generations, split into optimizer steps of
        per_device_train_batch_size x gradient_accumulation_steps."""
        if self.steps_per_generation is not None and self.generation_batch_size is not None:
            raise ConfigError("GRPOConfig: give steps_per_generation or generation_batch_size, not both")
        if self.generation_batch_size is not None:
            if self.generation_batch_size % self.per_device_train_batch_size:
                raise ConfigError(f"GRPOConfig.generation_batch_size ({self.generation_batch_size}) must be a multiple "
                                  f"of per_device_train_batch_size ({self.per_device_train_batch_size})")
            self.steps_per_generation = self.generation_batch_size // self.per_device_train_batch_size
        spg = self.steps_per_generation or self.gradient_accumulation_steps
        self.generation_batch_size = self.per_device_train_batch_size * spg
        if self.generation_batch_size % self.num_generations:
            raise ConfigError(
                f"GRPOConfig: the generation batch (per_device_train_batch_size x steps_per_generation = "
                f"{self.generation_batch_size}) must be a multiple of num_generations ({self.num_generations}): each "
                "prompt's completions form one group")
        if spg % self.gradient_accumulation_steps:
            raise ConfigError(f"GRPOConfig.steps_per_generation ({spg}) must be a multiple of "
                              f"gradient_accumulation_steps ({self.gradient_accumulation_steps})")
        if self.num_generations_eval is not None and self.num_generations_eval < 1:
            raise ConfigError(f"GRPOConfig.num_generations_eval: must be >= 1, got {self.num_generations_eval}")

    def _check_importance_sampling(self) -> None:
        if self.vllm_importance_sampling_cap is not None:  # TRL: the deprecated name wins over clip_max
            self.vllm_importance_sampling_clip_max = self.vllm_importance_sampling_cap
        if self.vllm_importance_sampling_mode not in IS_MODES:
            raise ConfigError(f"GRPOConfig.vllm_importance_sampling_mode: must be one of {list(IS_MODES)}, "
                              f"got {self.vllm_importance_sampling_mode!r}")
        if self.vllm_importance_sampling_clip_max is None:
            raise ConfigError("GRPOConfig.vllm_importance_sampling_clip_max: grpo-seq needs an upper bound (a number, "
                              "TRL's default 3.0), got None")
        if (self.vllm_importance_sampling_clip_min or 0.0) >= self.vllm_importance_sampling_clip_max:
            raise ConfigError(f"GRPOConfig.vllm_importance_sampling_clip_min ({self.vllm_importance_sampling_clip_min}) "
                              f"must be less than vllm_importance_sampling_clip_max ({self.vllm_importance_sampling_clip_max})")

    def _importance_sampling(self) -> dict[str, Any]:
        """TRL's vLLM correction as grpo-seq's: it applies where a cheaper copy samples
        (``sampling_dtype`` not float32), as TRL's applies where vLLM samples; TRL's defaults."""
        mode = None
        if self.sampling_dtype != "float32":
            mode = self.vllm_importance_sampling_mode if self.vllm_importance_sampling_correction else "none"
        return dict(sampling_dtype=self.sampling_dtype, importance_sampling_correction=mode,
                    importance_sampling_cap=float(self.vllm_importance_sampling_clip_max),
                    importance_sampling_min=float(self.vllm_importance_sampling_clip_min or 0.0))

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def _dtype(self) -> str:
        kw = self.model_init_kwargs or {}
        dtype = str(kw.get("dtype", kw.get("torch_dtype", "float32"))).replace("torch.", "")
        return "float32" if dtype == "auto" else dtype

    def _bf16(self) -> bool:
        if self.bf16 is not None:
            return bool(self.bf16)
        import torch

        return bool(not self.use_cpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported())

    def generation_options(self) -> dict[str, Any]:
        """The ``generate`` options beyond temperature, top_p and top_k: ``min_p``,
        ``repetition_penalty`` where not TRL's defaults, then ``generation_kwargs`` over them (as TRL)."""
        out: dict[str, Any] = {}
        if self.min_p is not None:
            out["min_p"] = self.min_p
        if self.repetition_penalty != 1.0:
            out["repetition_penalty"] = self.repetition_penalty
        return {**out, **(self.generation_kwargs or {})}

    def optimizer_steps_per_generation(self) -> int:
        """TRL's optimizer steps per generation batch: (steps_per_generation / gradient_accumulation_steps) x num_iterations."""
        return (self.generation_batch_size // self.per_device_train_batch_size // self.gradient_accumulation_steps
                * self.num_iterations)

    def lm_options(self, num_prompts: int, num_processes: int = 1) -> dict[str, Any]:
        """The :class:`grpo_seq.jobs.lm_spec.LMJob` options these stand for (``num_prompts``:
        the dataset's size, for ``num_train_epochs``). One grpo-seq step is one generation batch
        and its :meth:`optimizer_steps_per_generation` optimizer steps, as TRL's ``max_steps`` counts."""
        groups = self.generation_batch_size // self.num_generations
        per_gen = self.optimizer_steps_per_generation()
        steps = math.ceil(self.max_steps / per_gen) if self.max_steps > 0 else max(
            1, math.ceil(self.num_train_epochs * num_prompts / (groups * num_processes)))
        report = [] if self.report_to in ("none", None, []) else (
            [self.report_to] if isinstance(self.report_to, str) else list(self.report_to))
        return dict(
            output_dir=self.output_dir, num_generations=self.num_generations, num_groups=groups,
            num_minibatches=per_gen // self.num_iterations,
            micro_batch_size=self.micro_batch_size or self.per_device_train_batch_size,
            max_completion_length=self.max_completion_length, max_steps=steps, learning_rate=self.learning_rate,
            lr_schedule=self.lr_scheduler_type, weight_decay=self.weight_decay, adam_beta1=self.adam_beta1,
            adam_beta2=self.adam_beta2, adam_eps=self.adam_epsilon, max_grad_norm=self.max_grad_norm, beta=self.beta,
            epsilon=self.epsilon, mu=self.num_iterations,
            epsilon_high=self.epsilon if self.epsilon_high is None else self.epsilon_high,  # TRL's default
            reward_weights=self.reward_weights, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            shuffle_prompts=self.shuffle_dataset, seed=self.seed, bf16=self._bf16(), dtype=self._dtype(),
            gradient_checkpointing=self.gradient_checkpointing,
            log_completions_every=int(self.logging_steps) if self.log_completions else 0,
            save_steps=0 if self.save_strategy == "no" else max(1, math.ceil(self._steps(self.save_steps, steps) / per_gen)),
            save_total_limit=self.save_total_limit or 0, save_optimizer=not self.save_only_model, report_to=report,
            use_cpu=self.use_cpu, trust_remote_code=self.trust_remote_code, overwrite=self.overwrite,
            constant_baseline_items=self.constant_baseline_items,
            retain_freed_memory=False,  # a library call: the user's process keeps its malloc settings
            **self._importance_sampling(), **self._core_options(),
        )

    def _steps(self, value: float, total: int) -> int:
        """TRL's step counts: a float below 1 is a share of the run's optimizer steps."""
        return math.ceil(value * total * self.optimizer_steps_per_generation()) if 0 < value < 1 else int(value)

    def _core_options(self) -> dict[str, Any]:
        """The options that go to grpo-seq's core config under TRL's own name where it has that
        field (the loss variants, reference sync, ...), and those whose meaning maps onto it."""
        from ..jobs.lm_spec import LMJob
        from ..loop.config import LOSS_TYPES as CORE_LOSS_TYPES  # the core config validates against these

        core = {f.name for f in fields(LMJob)}
        out = {k: v for k, v in self._trl_only.items() if k in core}
        trl = self._trl_only
        if trl.get("entropy_coef", 0.0) or trl.get("use_adaptive_entropy", False):  # TRL's token-mean bonus
            out.update(ent_coef=trl.get("entropy_coef", 0.0), ent_mean="token",
                       **{f"ent_coef_{k}": trl[f"entropy_coef_{k}"] for k in ("min", "max", "delta")
                          if f"entropy_coef_{k}" in trl})
        if self.sync_ref_model:  # TR-DPO: the core's reference sync with a mix
            out.update(ref_sync_steps=self.ref_model_sync_steps, ref_sync_alpha=self.ref_model_mixup_alpha)
        out.setdefault("skip_steps_without_signal", False)  # TRL steps on every batch, signal or none
        out["loss_type"] = self.loss_type if self.loss_type in CORE_LOSS_TYPES else LOSS_TYPES[self.loss_type]
        out["scale_rewards"] = {True: "group", False: "none"}.get(self.scale_rewards, self.scale_rewards)
        return out


# TRL options held by a core option of another name (lm_options maps them)
MAPPED = frozenset({"entropy_coef", "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta"})


def _same(value: Any, default: Any) -> bool:
    try:
        return bool(value == default)
    except Exception:  # an object without a usable ==: not TRL's default
        return False


def _accelerator_config(value: Any) -> Any:
    """transformers' ``AcceleratorConfig`` from a dict, a JSON file's path or None, as TrainingArguments makes it."""
    from transformers.trainer_pt_utils import AcceleratorConfig

    if isinstance(value, AcceleratorConfig):
        return value
    if isinstance(value, str):
        return AcceleratorConfig.from_json_file(value)
    return AcceleratorConfig(**(value or {}))
