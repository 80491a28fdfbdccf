"""The GRPO family against TRL 1.16's ``GRPOTrainer._compute_loss`` on identical inputs (skipped
when trl is absent): every loss type and loss option TRL has, one at a time and in the
combinations the papers recommend, in value and in gradient (with respect to the log-probs, and
to the entropies where an entropy bonus makes them matter) to 1e-6.

As in ``tests/test_trl_agreement.py``, TRL's loss runs on a stand-in trainer whose model
"forward" returns fixed log-probs and entropies; the TRL option names map one to one onto
:class:`grpo_seq.math.objective.LossVariant` and ``grpo_loss``'s arguments.
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from grpo_seq.math.objective import LossVariant, grpo_loss

# TRL's trainer module is imported by the tests that call it, not at collection (seconds, on every worker)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("trl") is None,
                                reason="trl is not installed (pip install -e '.[dev]' installs it)")
from accelerate import Accelerator  # noqa: E402
from test_trl_agreement import B, MAX_LEN, T  # noqa: E402
from test_trl_agreement import inputs as base_inputs  # noqa: E402
from test_trl_agreement import trl_grpo  # noqa: E402

ACCELERATOR = Accelerator(cpu=True)
ARGS = dict(use_bias_correction_kl=False, delta=None, steps_per_generation=1, sapo_temperature_pos=1.0,
            sapo_temperature_neg=1.05, vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0, vespo_lambda_neg=2.0)


def inputs(seed: int = 0, spread: float = 0.3) -> dict:
    """``tests/test_trl_agreement.py``'s inputs, ``old`` log-probs ``spread / 0.3`` times as far from
    ``logp`` (ratios well off 1: clips and masks act), plus per-token entropies."""
    x = base_inputs(seed)
    x["old"] = x["logp"] + (x["old"] - x["logp"]) * (spread / 0.3)
    x["entropy"] = torch.rand(B, T, generator=torch.Generator().manual_seed(seed + 100)) * 2
    return x


def trl_loss(x: dict, loss_type: str, beta: float, eps_low: float, eps_high: float, opts: dict):
    """TRL's loss and its gradients (log-probs, entropies) with ``opts`` TRL options set."""
    TRAINER = trl_grpo().GRPOTrainer  # noqa: N806
    logp = x["logp"].clone().requires_grad_(True)
    entropy = x["entropy"].clone().requires_grad_(True)
    args = SimpleNamespace(**{**ARGS, **{k: v for k, v in opts.items() if k in ARGS}})
    stub = SimpleNamespace(
        top_entropy_quantile=opts.get("top_entropy_quantile", 1.0), vllm_importance_sampling_correction=True,
        off_policy_mask_threshold=opts.get("off_policy_mask_threshold"),
        importance_sampling_level=opts.get("importance_sampling_level", "token"), beta=beta, args=args,
        loss_type=loss_type, epsilon_low=eps_low, epsilon_high=eps_high, use_vllm="is_weight" in x,
        model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1, max_completion_length=MAX_LEN,
        entropy_coef=opts.get("entropy_coef", 0.0), use_adaptive_entropy=False,
        _entropy_bonus_enabled=opts.get("entropy_coef", 0.0) != 0.0, aux_loss_enabled=False,
        accelerator=ACCELERATOR, _metrics=defaultdict(lambda: defaultdict(list)),
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, entropy, None),
        get_off_policy_mask=TRAINER.get_off_policy_mask, get_gamma_weights=TRAINER.get_gamma_weights,
    )
    stub.get_high_entropy_mask = lambda e, m, t: TRAINER.get_high_entropy_mask(stub, e, m, t)
    batch = {
        "prompt_ids": torch.ones(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long), "completion_mask": x["mask"],
        "advantages": x["adv"], "old_per_token_logps": x["old"], "ref_per_token_logps": x["ref"],
        "num_items_in_batch": x["mask"].sum(),
    }
    if "is_weight" in x:  # the sampler-correction weights (TRL: vLLM's, ours: a cheaper sampling copy's)
        batch["importance_sampling_ratio"] = x["is_weight"]
    loss = TRAINER._compute_loss(stub, None, batch)
    loss.backward()
    return loss.item(), logp.grad, entropy.grad


def our_loss(x: dict, loss_type: str, beta: float, eps_low: float, eps_high: float, opts: dict):
    logp = x["logp"].clone().requires_grad_(True)
    entropy = x["entropy"].clone().requires_grad_(True)
    adv = x["adv"][:, None].expand(B, T)
    variant = LossVariant(**opts)
    loss, _ = grpo_loss(logp, x["old"], adv, x["mask"].bool(), eps_low=eps_low, eps_high=eps_high, beta=beta,
                        ref_logp_t=x["ref"] if beta > 0 else None, loss_type=loss_type, max_len=MAX_LEN,
                        entropy_t=entropy, variant=variant, is_weight_t=x.get("is_weight"))
    loss.backward()
    return loss.item(), logp.grad, entropy.grad


def check(x: dict, loss_type: str, beta: float = 0.0, eps_low: float = 0.2, eps_high: float = 0.28, **opts) -> None:
    ours, g_ours, h_ours = our_loss(x, loss_type, beta, eps_low, eps_high, opts)
    theirs, g_theirs, h_theirs = trl_loss(x, loss_type, beta, eps_low, eps_high, opts)
    assert ours == pytest.approx(theirs, abs=1e-6)
    torch.testing.assert_close(g_ours, g_theirs, atol=1e-6, rtol=0)
    if h_theirs is not None:  # only an entropy bonus gives the entropies a gradient
        torch.testing.assert_close(h_ours, h_theirs, atol=1e-6, rtol=0)


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", ["dapo", "cispo", "sapo", "luspo", "vespo"])
def test_each_new_loss_type_matches_trl(loss_type, beta):
    # cispo reads epsilon_high as its ceiling eps_max (ScaleRL recommends 5; 1.2 clips some tokens here)
    check(inputs(), loss_type, beta, eps_high=1.2 if loss_type == "cispo" else 0.28)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "luspo", "sapo", "cispo"])
def test_sequence_level_importance_sampling_matches_trl(loss_type):
    # GSPO: one ratio per completion, the exp of its mean token log ratio
    check(inputs(2), loss_type, 0.04, eps_low=3e-4, eps_high=4e-4, importance_sampling_level="sequence")


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_two_sided_clipping_matches_trl(level):
    check(inputs(3, spread=0.6), "grpo", 0.0, delta=1.3, importance_sampling_level=level)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_bias_corrected_kl_matches_trl(level):
    check(inputs(4), "dapo", 0.1, use_bias_correction_kl=True, importance_sampling_level=level)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "vespo"])
def test_off_policy_sequence_mask_matches_trl(loss_type):
    x = inputs(5, spread=0.8)
    check(x, loss_type, 0.04, off_policy_mask_threshold=0.1)


@pytest.mark.parametrize("quantile", [0.0, 0.2, 0.5])
def test_top_entropy_quantile_matches_trl(quantile):
    check(inputs(6), "dapo", 0.0, top_entropy_quantile=quantile)


@pytest.mark.parametrize("quantile", [1.0, 0.3])
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo"])
def test_entropy_bonus_matches_trl(loss_type, quantile):
    check(inputs(7), loss_type, 0.04, entropy_coef=0.05, top_entropy_quantile=quantile)


def test_sapo_temperatures_and_vespo_shape_match_trl():
    x = inputs(8, spread=0.5)
    check(x, "sapo", 0.0, sapo_temperature_pos=2.0, sapo_temperature_neg=0.5)
    check(x, "vespo", 0.0, vespo_k_pos=1.5, vespo_lambda_pos=2.0, vespo_k_neg=2.5, vespo_lambda_neg=1.0)


def test_the_papers_combinations_match_trl():
    x = inputs(9, spread=0.5)
    # DAPO: token-mean over the batch, clip-higher; GSPO: sequence ratios, tiny clip range
    check(x, "dapo", 0.0, eps_low=0.2, eps_high=0.28)
    check(x, "grpo", 0.0, eps_low=3e-4, eps_high=4e-4, importance_sampling_level="sequence")
    # CISPO with ScaleRL's eps_max = 5; DeepSeek-V3.2: masked off-policy sequences, corrected KL
    check(x, "cispo", 0.0, eps_high=5.0)
    check(x, "dapo", 0.04, off_policy_mask_threshold=0.2, use_bias_correction_kl=True, delta=1.5)


@pytest.mark.parametrize("loss_type", ["dapo", "cispo", "sapo", "vespo"])
def test_sampler_correction_weights_enter_as_in_trl(loss_type):
    # TRL multiplies each token's loss by its vLLM importance weight, except VESPO, which folds the weights
    # into its sequence ratio; our sampling copy's weights enter the same way
    x = inputs(10, spread=0.4)
    x["is_weight"] = torch.rand(B, T, generator=torch.Generator().manual_seed(3)) + 0.5
    check(x, loss_type, 0.04, eps_high=3.0 if loss_type == "cispo" else 0.28)
