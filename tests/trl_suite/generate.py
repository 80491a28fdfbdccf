"""Writes ``test_trl_grpo_trainer.py`` from TRL's ``tests/test_grpo_trainer.py``.

    python tests/trl_suite/generate.py path/to/trl/tests/test_grpo_trainer.py            # against grpo_seq.trl
    python tests/trl_suite/generate.py path/to/trl/tests/test_grpo_trainer.py --against trl --cpu-bf16 --out /tmp/x/test_x.py

The copy is TRL's file with these changes only: the import of ``GRPOConfig, GRPOTrainer`` (from
``grpo_seq.trl``, or from ``trl`` to measure TRL itself), TRL's ``tests/testing_utils`` and
``load_dataset`` taken from ``trl_stand_ins`` (the zen dataset built locally, ``require_*``
markers), and each ``"trl-internal-testing/tiny-..."`` hub id wrapped in ``hub(...)``: the folder
of a tiny model built from a config. The cases in :data:`LEFT_OUT` are skipped with their reason
(conftest.py); docs/guides/trl.md lists them.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = "huggingface/trl tests/test_grpo_trainer.py"

_GPU = "GPU-only (vLLM, Liger or hub kernels, bitsandbytes, an accelerator): not on a CPU"
_PRIVATE = "calls a private method of TRL's GRPOTrainer, not its public surface"
_QWEN_IDS = ("its fake generate returns Qwen's token ids (151657 = <tool_call>, ...), outside the stand-ins' "
             "character vocabulary; tests/trl/test_trl_tools.py plays the same contract")
_MULTI_ENV = "environment_factory as a dict of environments (routing by an `environment` column): not in grpo-seq"
# fnmatch patterns over "Class::test[param]" -> why the case is left out.
LEFT_OUT = {
    "TestGetHighEntropyMask::*": _PRIVATE + " (get_high_entropy_mask on a mock)",
    "TestGRPORolloutDispatch::*": "TRL's rollout_func dispatch into vLLM (internals, mocks)",
    "TestTransformersContinuousBatchingContract::*": "transformers' continuous-batching API, not the trainer",
    "TestGRPOTrainerVLM::*": "vision-language models: the door trains causal language models",
    "TestGRPOTrainerSlow::*": _GPU,
    "*liger*": _GPU, "*vllm*": _GPU, "*test_train_loss_types[[]*-True]": _GPU + " (use_liger_kernel=True)",
    "*test_train_with_bias_correction_kl[[]True]": _GPU + " (use_liger_kernel=True)",
    "*test_train_delta_clipping[[]True]": _GPU + " (use_liger_kernel=True)", "*_with_tools*": _QWEN_IDS,
    "*test_train_with_environment_factory*": _QWEN_IDS, "*test_train_with_environment_owned_reward*": _QWEN_IDS,
    "*test_environment_owned_reward_coexists_with_reward_funcs*": _QWEN_IDS,
    "*test_train_with_environment_owned_data*": _QWEN_IDS, "*malformed_tool_calls*": _QWEN_IDS,
    "*test_train_with_multiple_environments*": _MULTI_ENV, "*unknown_environment*": _MULTI_ENV, "*mixed_environments*": _MULTI_ENV,
    "*tools_multimodal*": "tool calling with images: the door trains causal language models",
    "TestGRPOTrainer::test_train[[]*Glm4Moe*": "no stand-in built for this architecture",
    "TestGRPOTrainer::test_train[[]*NemotronH*": "no stand-in built for this architecture",
    "*test_get_off_policy_mask*": _PRIVATE + " (get_off_policy_mask)",
    "*test_entropy_bonus_flows_gradients": _PRIVATE + " (_get_per_token_logps_and_entropies; fails against TRL 1.16 too)",
    "*test_prepare_input_called_with_correct_data*": _PRIVATE + " (patches _prepare_inputs)",
    "*test_train_with_mask_truncated_completions*": "patches transformers' GenerationMixin.generate with fixed ids",
    "*test_warning_raised_*": "asserts the text of TRL's own log warnings (logger trl.trainer.grpo_trainer)",
    "*test_iterable_dataset_forces_num_workers_zero*": "transformers Trainer's dataloader worker settings",
    "*test_iterable_eval_keeps_map_style_train_workers*": "transformers Trainer's dataloaders (get_train_dataloader)",
    "*test_train_with_cast_lm_head_to_fp32*": "no stand-in built for these architectures",
}

# Cases that run only with GRPO_SEQ_TRL_SUITE=all: the suite's default run fits its time budget
# (each of these repeats what a default case covers, at several seconds a case).
NOT_BY_DEFAULT = {
    "TestGRPOTrainer::test_train_loss_types[[]bnpo-*": "loss_type parametrisation (dapo runs by default)",
    "TestGRPOTrainer::test_train_loss_types[[]dr_grpo-*": "loss_type parametrisation (dapo runs by default)",
    "TestGRPOTrainer::test_train_loss_types[[]cispo-*": "loss_type parametrisation (dapo runs by default)",
    "TestGRPOTrainer::test_train_loss_types[[]sapo-*": "loss_type parametrisation (dapo runs by default)",
    "TestGRPOTrainer::test_train_loss_types[[]luspo-*": "loss_type parametrisation (dapo runs by default)",
    "TestGRPOTrainer::test_train_loss_types[[]vespo-*": "loss_type parametrisation (dapo runs by default)",
    "TestGRPOTrainer::test_train_dataset_format[[]standard_prompt_only]": "test_train covers a standard dataset",
    "TestGRPOTrainer::test_train_with_iterable_dataset": "test_init/test_evaluate_with_eval_dataset cover iterable datasets",
    "TestGRPOTrainer::test_train_scale_rewards[[]True]": "scale_rewards parametrisation (group, batch, none run)",
    "TestGRPOTrainer::test_train_scale_rewards[[]False]": "scale_rewards parametrisation (group, batch, none run)",
    "TestGRPOTrainer::test_train[[]*Cohere2*": "model parametrisation (Qwen2, Qwen3 MoE run by default)",
    "TestGRPOTrainer::test_train[[]*GptOss*": "model parametrisation (Qwen2, Qwen3 MoE run by default)",
}

# Cases that fail against grpo_seq.trl today, and why (xfail, not strict: a fix shows as XPASS).
KNOWN_FAILING: dict[str, str] = {}


def adapt(text: str, against: str = "grpo_seq", cpu_bf16: bool = False) -> str:
    """TRL's test file with the import, its test utilities, load_dataset and hub ids replaced.
    ``cpu_bf16`` (to measure TRL on a CPU): transformers' check for a bf16 GPU answers yes, so
    TRL's default ``bf16=True`` runs as bf16 autocast on the CPU instead of being refused."""
    target = "from grpo_seq.trl import GRPOConfig, GRPOTrainer" if against == "grpo_seq" else \
        "from trl import GRPOConfig, GRPOTrainer"
    replacements = [
        ("from trl import GRPOConfig, GRPOTrainer", target),
        ("from trl.import_utils import is_liger_kernel_available\n", ""),
        ("from trl.trainer.utils import get_kbit_device_map\n", ""),
        ("from .testing_utils import (", "from trl_stand_ins import hub, load_dataset, is_liger_kernel_available, "
                                         "get_kbit_device_map  # generated: local stand-ins\nfrom trl_stand_ins import ("),
    ]
    for old, new in replacements:
        if old not in text and "testing_utils" not in old and "GRPOConfig" not in old:
            continue
        if old not in text:
            raise SystemExit(f"error: {old!r} not found in TRL's file: adapt generate.py to its version")
        text = text.replace(old, new, 1)
    text = re.sub(r"^(from datasets import .*?)\bload_dataset\b,? ?", r"\1", text, count=1, flags=re.M)
    text = re.sub(r"from datasets import (.*?),\s*$", r"from datasets import \1", text, count=1, flags=re.M)
    text = re.sub(r'"(trl-internal-testing/tiny-[^"]+)"', r'hub("\1")', text)
    header = (f"# Generated by tests/trl_suite/generate.py from {SOURCE} (Apache-2.0, The HuggingFace Team).\n"
              "# Do not edit: change generate.py or trl_stand_ins.py and regenerate.\n")
    if cpu_bf16:
        text += ("\n\nimport transformers.training_args as _training_args  # generated: --cpu-bf16\n\n"
                 "_training_args.is_torch_bf16_gpu_available = lambda: True\n")
    return header + text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="TRL's tests/test_grpo_trainer.py")
    parser.add_argument("--against", choices=("grpo_seq", "trl"), default="grpo_seq")
    parser.add_argument("--cpu-bf16", action="store_true", help="let TRL's default bf16 run on a CPU (measuring TRL)")
    parser.add_argument("--out", type=Path, default=HERE / "test_trl_grpo_trainer.py")
    args = parser.parse_args()
    args.out.write_text(adapt(args.source.read_text(), args.against, args.cpu_bf16))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
