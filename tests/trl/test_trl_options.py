"""grpo_seq.trl.GRPOConfig takes every TRL 1.16 option: TRL's defaults always, other values with
TRL's meaning or refused by name with the reason; the batch arithmetic of steps_per_generation."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from grpo_seq.errors import UsageError
from grpo_seq.trl import GRPOConfig
from grpo_seq.trl.config import NO_EFFECT, REFUSED
from grpo_seq.trl.trl_options import TRL_DEFAULTS


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="compares with the installed TRL")
def test_the_table_is_the_installed_trls_options_and_defaults():
    import trl

    if trl.__version__ != "1.16.0":
        pytest.skip(f"the table is TRL 1.16.0's; installed: {trl.__version__}")
    theirs = {}
    for f in dataclasses.fields(trl.GRPOConfig):
        if f.init:
            theirs[f.name] = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    assert theirs == TRL_DEFAULTS


def test_every_trl_default_is_accepted_alone_and_all_together():
    for name, default in TRL_DEFAULTS.items():
        if name in ("per_device_train_batch_size", "num_generations"):
            continue  # accepted together below: alone, 8 and 8 already fit
        GRPOConfig(**{name: default})
    args = GRPOConfig(**TRL_DEFAULTS)
    assert args.importance_sampling_level == "token" and args.multi_objective_aggregation == "sum_then_normalize"
    assert args.accelerator_config.dispatch_batches is None  # transformers' AcceleratorConfig, as TrainingArguments holds


@pytest.mark.parametrize("name, value, reason", [
    ("vllm_mode", "server", "vLLM needs a CUDA GPU"),
    ("hub_model_id", "me/model", "grpo-seq does not push to the hub"),
    ("warmup_steps", 10, "without warm-up"),
    ("cache_implementation", "static", "transformers' own KV cache"),
])
def test_a_value_grpo_seq_cannot_apply_is_refused_by_name_with_the_reason(name, value, reason):
    with pytest.raises(UsageError) as e:
        GRPOConfig(**{name: value})
    assert f"{name}={value!r} is a TRL option grpo-seq cannot apply here" in str(e.value) and reason in str(e.value)
    assert f"TRL's default {TRL_DEFAULTS[name]!r}" in str(e.value)


def test_options_without_effect_here_take_any_value_and_are_kept():
    args = GRPOConfig(run_name="exp-1", dataloader_num_workers=4, logging_first_step=True, pad_to_multiple_of=8)
    assert (args.run_name, args.dataloader_num_workers, args.pad_to_multiple_of) == ("exp-1", 4, 8)
    assert not NO_EFFECT & set(REFUSED)  # an option is one or the other


def test_steps_per_generation_splits_a_generation_batch_into_optimizer_steps():
    # 4 completions a micro-step, 2 micro-steps an optimizer step, 4 micro-steps a generation:
    # a generation batch of 16 completions = 4 prompts x G 4, trained in 2 optimizer steps.
    args = GRPOConfig(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4,
                      num_generations=4, num_iterations=3, max_steps=12)
    opts = args.lm_options(num_prompts=100)
    assert args.generation_batch_size == 16 and opts["num_groups"] == 4 and opts["num_minibatches"] == 2
    assert args.optimizer_steps_per_generation() == 6  # 2 optimizer steps x 3 iterations
    assert opts["max_steps"] == 2 and opts["mu"] == 3  # TRL's 12 optimizer steps = 2 generation batches
    with pytest.raises(UsageError, match=r"generation batch .* = 6\) must be a multiple of num_generations \(4\)"):
        GRPOConfig(per_device_train_batch_size=3, steps_per_generation=2, num_generations=4)


@pytest.mark.parametrize("scale, core", [("group", "group"), ("batch", "batch"), ("none", "none"),
                                         (True, "group"), (False, "none")])
def test_scale_rewards_maps_onto_the_core_option(scale, core):
    assert GRPOConfig(scale_rewards=scale).lm_options(num_prompts=8)["scale_rewards"] == core


def test_trl_options_the_core_has_pass_through_under_their_own_name():
    opts = GRPOConfig(loss_type="cispo", importance_sampling_level="sequence", delta=1.5, top_entropy_quantile=0.2,
                      mask_truncated_completions=True).lm_options(num_prompts=8)
    assert (opts["loss_type"], opts["importance_sampling_level"], opts["delta"]) == ("cispo", "sequence", 1.5)
    assert opts["top_entropy_quantile"] == 0.2 and opts["mask_truncated_completions"] is True
