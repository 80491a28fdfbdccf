"""``GRPOConfig`` under TRL's names, mapped onto :class:`grpo_seq.jobs.lm_spec.LMJob`.

The defaults are TRL 1.16's, except ``gradient_checkpointing`` (False: on a CPU memory is rarely
the limit, and recomputing costs a third more time), ``bf16`` (None: on where a CUDA GPU supports
it, as TRL does, off elsewhere rather than refused) and ``output_dir`` (None: a new folder under
``runs/``). An option TRL has and grpo-seq does not is refused by name (:data:`TRL_ONLY`), as is a
name neither knows; docs/guides/trl.md holds the table.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError, UsageError

__all__ = ["GRPOConfig", "TRL_ONLY", "LOSS_TYPES"]

# TRL's loss_type -> ours. dapo (TRL's default) normalises by the active tokens of the whole
# accumulated batch: our bnpo on one process (gradients accumulate over micro-batches exactly).
LOSS_TYPES = {"dapo": "bnpo", "bnpo": "bnpo", "grpo": "grpo", "dr_grpo": "dr_grpo"}

# TRL's vllm_importance_sampling_mode values (grpo-seq's importance_sampling_correction modes).
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")

# TRL GRPOConfig / TrainingArguments options that grpo-seq does not have (refused by name).
TRL_ONLY = frozenset({
    "use_vllm", "vllm_mode", "vllm_model_impl", "vllm_enable_sleep_mode", "vllm_server_base_url", "vllm_server_host",
    "vllm_server_port", "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size",
    "delta", "importance_sampling_level", "multi_objective_aggregation", "mask_truncated_completions",
    "top_entropy_quantile", "entropy_coef", "use_adaptive_entropy", "use_bias_correction_kl", "off_policy_mask_threshold",
    "min_p", "repetition_penalty", "generation_kwargs", "chat_template_kwargs", "cache_implementation",
    "num_generations_eval", "steps_per_generation", "generation_batch_size", "disable_dropout", "cast_lm_head_to_fp32",
    "max_tool_calling_iterations", "use_transformers_paged", "use_liger_kernel", "fp16", "tf32", "torch_compile",
    "deepspeed", "fsdp", "push_to_hub", "hub_model_id", "eval_strategy", "eval_steps", "per_device_eval_batch_size",
    "warmup_ratio", "warmup_steps", "optim", "lr_scheduler_kwargs", "logging_dir", "logging_first_step",
    "logging_strategy", "run_name", "dataloader_num_workers", "ddp_find_unused_parameters", "gradient_checkpointing_kwargs",
    "log_completions_hub_repo", "num_completions_to_print", "log_unique_prompts", "sapo_temperature_neg",
    "sapo_temperature_pos", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg",
    "load_best_model_at_end", "metric_for_best_model", "data_seed", "full_determinism", "router_aux_loss_coef",
    "pad_to_multiple_of", "ds3_gather_for_generation",
})


@dataclass(init=False)
class GRPOConfig:
    """TRL's ``GRPOConfig`` for :class:`grpo_seq.trl.GRPOTrainer`: the same names and meanings
    where grpo-seq has the option (the table in docs/guides/trl.md). Unknown names and TRL options
    grpo-seq lacks are refused by name (:class:`grpo_seq.errors.UsageError`)."""

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

    def __init__(self, **kwargs: Any) -> None:
        names = [f.name for f in fields(self)]
        for key in kwargs:
            if key in TRL_ONLY:
                raise UsageError(f"GRPOConfig: {key!r} is a TRL option that grpo-seq does not have; remove it "
                                 "(docs/guides/trl.md lists TRL's options and what they are here)")
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                raise UsageError(f"GRPOConfig: unknown option {key!r}" + (f"; did you mean {close[0]!r}?" if close else
                                 "; docs/guides/trl.md lists the options"))
        for f in fields(self):
            setattr(self, f.name, kwargs.get(f.name, f.default))
        self._check()

    def _check(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"GRPOConfig.loss_type: grpo-seq has {sorted(LOSS_TYPES)}, got {self.loss_type!r}")
        if self.scale_rewards not in (True, False, "group", "none", "batch"):
            raise ConfigError(f"GRPOConfig.scale_rewards: must be 'group', 'none' (or True/False), got {self.scale_rewards!r}")
        if self.scale_rewards == "batch":
            raise ConfigError("GRPOConfig.scale_rewards: 'batch' is not in grpo-seq; use 'group' or 'none'")
        if self.lr_scheduler_type not in ("linear", "constant"):
            raise ConfigError(f"GRPOConfig.lr_scheduler_type: grpo-seq has 'linear' and 'constant', got {self.lr_scheduler_type!r}")
        if self.save_strategy not in ("steps", "no"):
            raise ConfigError(f"GRPOConfig.save_strategy: grpo-seq has 'steps' and 'no', got {self.save_strategy!r}")
        if self.sync_ref_model and self.ref_model_mixup_alpha != 1.0:
            raise ConfigError("GRPOConfig.ref_model_mixup_alpha: grpo-seq's sync_ref_model replaces the reference "
                              "(alpha 1.0); mixing is not in grpo-seq")
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_iterations"):
            if getattr(self, name) < 1:
                raise ConfigError(f"GRPOConfig.{name}: must be >= 1, got {getattr(self, name)}")
        completions = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if completions % self.num_generations:
            raise ConfigError(
                f"GRPOConfig: per_device_train_batch_size x gradient_accumulation_steps ({completions}) must be a "
                f"multiple of num_generations ({self.num_generations}): each prompt's completions form one group")
        self._check_importance_sampling()
        if self.model_init_kwargs and set(self.model_init_kwargs) - {"dtype", "torch_dtype"}:
            raise ConfigError(f"GRPOConfig.model_init_kwargs: grpo-seq reads only dtype, got {sorted(self.model_init_kwargs)}")

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

    def lm_options(self, num_prompts: int, num_processes: int = 1) -> dict[str, Any]:
        """The :class:`grpo_seq.jobs.lm_spec.LMJob` options these stand for (``num_prompts``:
        the dataset's size, for ``num_train_epochs``)."""
        groups = self.per_device_train_batch_size * self.gradient_accumulation_steps // self.num_generations
        steps = self.max_steps if self.max_steps > 0 else max(
            1, math.ceil(self.num_train_epochs * num_prompts / (groups * num_processes)))
        report = [] if self.report_to in ("none", None, []) else (
            [self.report_to] if isinstance(self.report_to, str) else list(self.report_to))
        return dict(
            output_dir=self.output_dir, num_generations=self.num_generations, num_groups=groups,
            micro_batch_size=self.micro_batch_size or self.per_device_train_batch_size,
            max_completion_length=self.max_completion_length, max_steps=steps, learning_rate=self.learning_rate,
            lr_schedule=self.lr_scheduler_type, weight_decay=self.weight_decay, adam_beta1=self.adam_beta1,
            adam_beta2=self.adam_beta2, adam_eps=self.adam_epsilon, max_grad_norm=self.max_grad_norm, beta=self.beta,
            epsilon=self.epsilon, epsilon_high=self.epsilon_high, mu=self.num_iterations,
            loss_type=LOSS_TYPES[self.loss_type], scale_rewards=self.scale_rewards in (True, "group"),
            reward_weights=self.reward_weights, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
            shuffle_prompts=self.shuffle_dataset, seed=self.seed, bf16=self._bf16(), dtype=self._dtype(),
            gradient_checkpointing=self.gradient_checkpointing,
            log_completions_every=int(self.logging_steps) if self.log_completions else 0,
            save_steps=0 if self.save_strategy == "no" else int(self.save_steps),
            save_total_limit=self.save_total_limit or 0, save_optimizer=not self.save_only_model, report_to=report,
            use_cpu=self.use_cpu, trust_remote_code=self.trust_remote_code,
            ref_sync_steps=self.ref_model_sync_steps if self.sync_ref_model else 0, overwrite=self.overwrite,
            retain_freed_memory=False,  # a library call: the user's process keeps its malloc settings
            **self._importance_sampling(),
        )
