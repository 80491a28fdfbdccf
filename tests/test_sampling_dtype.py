"""Sampling from a cheaper copy (sampling_dtype) and the importance weights that correct for it."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from accelerate import Accelerator

from grpo_seq.errors import ConfigError, UsageError
from grpo_seq.generation.sampling_copy import SAMPLING_DTYPES, SamplingCopy, _quantised_weight
from grpo_seq.jobs import lm_spec
from grpo_seq.jobs.lm import build
from grpo_seq.jobs.lm_spec import LMJob
from grpo_seq.math.objective import IS_MODES, grpo_loss, importance_weights, sampler_log_ratio, sampler_mismatch_stats
from grpo_seq.scoring.rewards import RewardScorer
from grpo_seq.trl.config import GRPOConfig as TRLConfig
from tiny_lm import chat_rows, length_reward, make_tiny_lm

E = math.e
LN4 = math.log(4.0)


# -- the importance weights, by hand --------------------------------------------------------------

# Trained policy's log-probs at sampling time (pi_old) and the sampler's (q); the last token of row 1
# is padding. d = old - sampler: row 0 [0, 1, -1], row 1 [0, ln 4, (0)]; rho = exp(d):
# row 0 [1, e, 1/e], row 1 [1, 4, 1].
OLD = torch.tensor([[0.0, -1.0, -2.0], [-0.5, -0.5, 0.0]])
SAMPLER = torch.tensor([[0.0, -2.0, -1.0], [-0.5, -0.5 - LN4, 9.0]])
MASK = torch.tensor([[True, True, True], [True, True, False]])


def test_log_ratio_per_token_and_per_sequence():
    torch.testing.assert_close(sampler_log_ratio(OLD, SAMPLER, MASK), torch.tensor([[0.0, 1.0, -1.0], [0.0, LN4, 0.0]]))
    # a sequence's ratio is the product of its tokens': d = 0 + 1 - 1 = 0 and 0 + ln 4 = ln 4
    torch.testing.assert_close(sampler_log_ratio(OLD, SAMPLER, MASK, "sequence"), torch.tensor([[0.0], [LN4]]))
    unknown = SAMPLER.clone()
    unknown[0, 1] = float("nan")  # a sampler that could not score a token: no correction there (TRL's rule)
    assert sampler_log_ratio(OLD, unknown, MASK)[0, 1] == 0.0


@pytest.mark.parametrize("mode, floor, weights, corrected", [
    # min(rho, 3): only row 1's 4 is cut to 3
    ("token_truncate", 0.0, [[1.0, E, 1 / E], [1.0, 3.0, 1.0]], [[0, 0, 0], [0, 1, 0]]),
    # [0.5, 3]: 1/e = 0.37 is below, 4 above: both zeroed
    ("token_mask", 0.5, [[1.0, E, 0.0], [1.0, 0.0, 1.0]], [[0, 0, 1], [0, 1, 0]]),
    # truncate with a floor: 1/e raised to 0.5
    ("token_truncate", 0.5, [[1.0, E, 0.5], [1.0, 3.0, 1.0]], [[0, 0, 1], [0, 1, 0]]),
])
def test_token_weights_truncate_or_mask(mode, floor, weights, corrected):
    w, c = importance_weights(sampler_log_ratio(OLD, SAMPLER, MASK), mode, cap=3.0, floor=floor)
    torch.testing.assert_close(w, torch.tensor(weights))
    assert c.int().tolist() == corrected


@pytest.mark.parametrize("mode, weights", [("sequence_truncate", [[1.0], [3.0]]), ("sequence_mask", [[1.0], [0.0]])])
def test_sequence_weights_truncate_or_mask_the_whole_completion(mode, weights):
    # sequence ratios 1 and 4: 4 is cut to 3, or the whole second completion drops out
    w, c = importance_weights(sampler_log_ratio(OLD, SAMPLER, MASK, "sequence"), mode, cap=3.0)
    torch.testing.assert_close(w, torch.tensor(weights))
    assert c.flatten().tolist() == [False, True]


def test_weights_multiply_the_clipped_surrogate_only():
    # ratio 1 (logp = old), A = 1: each token's objective is its weight; bnpo averages the 5 tokens:
    # (1 + e + 1/e + 1 + 3) / 5 = 8.08616 / 5 = 1.617232
    w, _ = importance_weights(sampler_log_ratio(OLD, SAMPLER, MASK), "token_truncate", cap=3.0)
    adv = torch.ones(2, 3)
    loss, _ = grpo_loss(OLD, OLD, adv, MASK, eps_low=0.2, loss_type="bnpo", is_weight_t=w)
    assert loss.item() == pytest.approx(-(5 + E + 1 / E) / 5, rel=1e-6)
    # the KL term is not weighted: beta * k3 against a reference 1 nat lower on every token,
    # exp(-1) + 1 - 1 = 1/e per token, is added as is
    ref = OLD - 1.0
    loss_kl, _ = grpo_loss(OLD, OLD, adv, MASK, eps_low=0.2, loss_type="bnpo", is_weight_t=w, beta=0.1, ref_logp_t=ref)
    assert loss_kl.item() == pytest.approx(loss.item() + 0.1 / E, rel=1e-6)


def test_mismatch_statistics():
    w, c = importance_weights(sampler_log_ratio(OLD, SAMPLER, MASK), "token_truncate", cap=3.0)
    s = sampler_mismatch_stats(OLD, SAMPLER, MASK, w, c)
    # k3 = exp(d) - d - 1: 0, e - 2, 1/e, 0, 3 - ln 4; mean over the 5 tokens
    assert s["sampling/kl"].item() == pytest.approx((E - 2 + 1 / E + 3 - LN4) / 5, rel=1e-6)
    assert s["sampling/kl_k1"].item() == pytest.approx(-(1 - 1 + LN4) / 5, rel=1e-6)  # mean of -d
    assert s["sampling/is_ratio_mean"].item() == pytest.approx((5 + E + 1 / E) / 5, rel=1e-6)
    assert s["sampling/is_ratio_min"].item() == pytest.approx(1 / E, rel=1e-6)
    assert s["sampling/is_ratio_max"].item() == pytest.approx(3.0)
    assert s["sampling/is_corrected_fraction"].item() == pytest.approx(1 / 5)


# -- runs on a tiny model ------------------------------------------------------------------------


def one_run(steps: int = 1, **options):
    """A tiny LM job built as the command line builds it (no output folder); the trainer and its metrics."""
    torch.manual_seed(0)
    model, tok = make_tiny_lm()
    options = {"num_generations": 4, "num_groups": 2, "max_completion_length": 8, "beta": 0.0, "learning_rate": 1e-2,
               "micro_batch_size": 0, "seed": 0, **options}
    spec = LMJob(model="tiny", **options)
    lm = build(spec, chat_rows(), RewardScorer([length_reward]), model, tok, Accelerator(cpu=True))
    metrics = [lm.trainer.step() for _ in range(steps)]
    return lm.trainer, metrics


def without_timings(m: dict) -> dict:
    return {k: v for k, v in m.items() if not k.startswith("perf/")}


def test_float32_is_unchanged_and_its_sampler_agrees_with_the_trainer():
    base, (m0,) = one_run()
    explicit, (m1,) = one_run(sampling_dtype="float32")
    assert without_timings(m0) == without_timings(m1)
    assert base.last_batch.sampler_logp is None and not any(k.startswith("sampling/") for k in m0)
    assert base.policy._sampling_copy.model is None  # no copy: the policy samples itself
    # Asked to correct anyway, the float32 sampler's log-probs are the trainer's (up to summation order).
    _, (m2,) = one_run(importance_sampling_correction="token_truncate")
    assert abs(m2["sampling/kl_k1"]) < 1e-5 and m2["sampling/kl"] < 1e-8
    assert m2["sampling/is_ratio_min"] == pytest.approx(1.0, abs=1e-4)
    assert m2["sampling/is_ratio_max"] == pytest.approx(1.0, abs=1e-4)
    assert m2["loss/policy"] == pytest.approx(m0["loss/policy"], abs=1e-5)


def test_bfloat16_copy_follows_every_update_and_the_step_trains():
    trainer, (m,) = one_run(sampling_dtype="bfloat16")
    sampler_copy = trainer.policy._sampling_copy.model
    assert {p.dtype for p in sampler_copy.parameters()} == {torch.bfloat16}
    assert all(b.dtype == torch.float32 for b in sampler_copy.buffers() if b.is_floating_point())  # rotary stays fp32
    assert {p.dtype for p in trainer.policy.model.parameters()} == {torch.float32}  # training stays float32
    assert math.isfinite(m["loss/policy"]) and math.isfinite(m["reward/mean"]) and m["loss/grad_norm"] > 0
    assert 0 < m["sampling/kl"] < 0.05  # bfloat16 rounding: a small, non-zero mismatch
    assert 0 < m["sampling/is_ratio_min"] <= m["sampling/is_ratio_mean"] <= m["sampling/is_ratio_max"] <= 3.0
    assert 0 <= m["sampling/is_corrected_fraction"] <= 1
    trained = [p.detach().clone() for p in trainer.policy.model.parameters()]  # after step 1's update
    trainer.step()  # samples from the copy refreshed from those weights, then updates them again
    assert trainer.policy._sampling_copy.model is sampler_copy  # refreshed in place, not rebuilt
    for c, p in zip(sampler_copy.parameters(), trained):
        assert torch.equal(c, p.to(torch.bfloat16))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's own quantize_dynamic, called here for comparison
def test_int8_copy_is_quantised_and_requantised_after_an_update():
    trainer, (m,) = one_run(sampling_dtype="int8", importance_sampling_correction="sequence_mask")
    qtype = torch.ao.nn.quantized.dynamic.Linear
    sampler_copy = trainer.policy._sampling_copy.model
    quantised = {n: q for n, q in sampler_copy.named_modules() if isinstance(q, qtype)}
    assert "model.layers.0.self_attn.q_proj" in quantised and "lm_head" in quantised
    assert math.isfinite(m["loss/policy"]) and m["sampling/kl"] > 0
    trainer.policy._generation_model()  # the refresh before the next sampling
    model = trainer.policy.model
    fresh = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
    for name, q in quantised.items():
        assert torch.equal(q.weight().int_repr(), fresh.get_submodule(name).weight().int_repr())
        assert q.weight().q_scale() == fresh.get_submodule(name).weight().q_scale()
    layer = model.model.layers[0].mlp.up_proj
    assert torch.equal(quantised["model.layers.0.mlp.up_proj"].weight().int_repr(), _quantised_weight(layer.weight).int_repr())
    # under --bf16's autocast the int8 copy still samples (in float32 activations, its own precision)
    enc = trainer.sampler.tokenizer(["hi", "a"], return_tensors="pt", padding=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ids, logp = trainer.policy.generate(enc["input_ids"], enc["attention_mask"], num_return_sequences=2,
                                            max_new_tokens=3, do_sample=True, output_logprobs=True)
    assert ids.shape[0] == 4 and logp.dtype == torch.float32 and bool((logp <= 0).all())


def test_int8_refuses_lora_and_16_bit_models():
    model, _ = make_tiny_lm()
    model.peft_config = {}
    with pytest.raises(ValueError, match="int8: LoRA"):
        SamplingCopy("int8").refresh(model)
    with pytest.raises(ValueError, match="int8: dynamic quantisation takes float32 weights; this model's are torch.bfloat16"):
        SamplingCopy("int8").refresh(make_tiny_lm()[0].to(torch.bfloat16))


# -- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("options, message", [
    ({"sampling_dtype": "fp8"}, "--sampling_dtype: must be one of float32, bfloat16, int8, got 'fp8'"),
    ({"sampling_dtype": "int8", "use_peft": True}, "--sampling_dtype: int8 is not offered with LoRA"),
    ({"sampling_dtype": "int8", "dtype": "bfloat16"}, "--sampling_dtype: int8 quantises float32 weights"),
    ({"importance_sampling_correction": "token"}, "--importance_sampling_correction: must be one of"),
    ({"importance_sampling_cap": 0.0}, "--importance_sampling_cap: must be > 0"),
    ({"importance_sampling_min": 3.0}, "--importance_sampling_min: must be >= 0 and below"),
])
def test_bad_options_are_refused_by_name(options, message):
    with pytest.raises(ConfigError, match=message):
        LMJob(**options)


def test_the_correction_defaults_to_token_truncate_with_a_cheaper_copy_only():
    assert LMJob().sampler_correction is None
    assert LMJob(sampling_dtype="bfloat16").sampler_correction == {"mode": "token_truncate", "cap": 3.0, "floor": 0.0}
    assert LMJob(sampling_dtype="int8", importance_sampling_correction="off").sampler_correction is None
    assert lm_spec.SAMPLING_DTYPES == SAMPLING_DTYPES and set(lm_spec.IS_CORRECTIONS) == {"none", "off", *IS_MODES}


def test_trl_names_map_onto_ours():
    def mapped(**kw):
        o = TRLConfig(max_steps=1, **kw).lm_options(num_prompts=8)
        return o["sampling_dtype"], o["importance_sampling_correction"], o["importance_sampling_cap"], o["importance_sampling_min"]

    assert mapped() == ("float32", None, 3.0, 0.0)  # no cheaper copy: nothing to correct (TRL: no vLLM)
    assert mapped(sampling_dtype="bfloat16") == ("bfloat16", "sequence_mask", 3.0, 0.0)  # TRL's default mode
    assert mapped(sampling_dtype="int8", vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_cap=2.0,
                  vllm_importance_sampling_clip_min=0.1) == ("int8", "token_truncate", 2.0, 0.1)
    assert mapped(sampling_dtype="bfloat16", vllm_importance_sampling_correction=False)[1] == "none"
    with pytest.raises(ConfigError, match="vllm_importance_sampling_mode: must be one of"):
        TRLConfig(vllm_importance_sampling_mode="token")
    with pytest.raises(ConfigError, match="clip_max: grpo-seq needs an upper bound"):
        TRLConfig(vllm_importance_sampling_clip_max=None)
    with pytest.raises(UsageError, match="use_vllm=True is a TRL option"):
        TRLConfig(use_vllm=True)


def test_lora_samples_from_a_bfloat16_copy_of_base_and_adapters():
    pytest.importorskip("peft")
    trainer, (m,) = one_run(sampling_dtype="bfloat16", use_peft=True, lora_r=4)
    sampler_copy = trainer.policy._sampling_copy.model
    assert {p.dtype for p in sampler_copy.parameters()} == {torch.bfloat16}
    assert math.isfinite(m["loss/policy"]) and 0 < m["sampling/kl"] < 0.05
    trainer.policy._generation_model()  # the refresh before the next sampling: the trained adapters, cast
    for (name, c), p in zip(sampler_copy.named_parameters(), trainer.policy.model.parameters()):
        assert torch.equal(c, p.detach().to(torch.bfloat16)), name
