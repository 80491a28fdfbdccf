"""Our loss against TRL's GRPOTrainer loss on identical inputs (skipped when trl is absent).

TRL's ``_compute_loss`` runs on a stand-in trainer object whose model "forward" returns fixed
log-probs, so both sides see the same log-probs, old and reference log-probs, advantages and
masks; the loss values and their gradients with respect to the log-probs must agree.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from grpo_seq.math.objective import grpo_loss

# TRL's trainer module is imported by the tests that call it, not at collection (seconds, on every worker)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("trl") is None,
                                reason="trl is not installed (pip install -e '.[dev]' installs it)")
from accelerate import Accelerator  # noqa: E402


def trl_grpo():
    """TRL's ``trl.trainer.grpo_trainer`` module."""
    return importlib.import_module("trl.trainer.grpo_trainer")


B, T, MAX_LEN = 6, 7, 9


def inputs(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 3, 5, 1, 6, 4])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    logp = -torch.rand(B, T, generator=g) * 3
    return {
        "logp": logp,
        "old": logp + 0.3 * torch.randn(B, T, generator=g),  # ratios well off 1: both clip branches act
        "ref": logp + 0.5 * torch.randn(B, T, generator=g),
        "adv": torch.randn(B, generator=g),
        "mask": mask,
    }


def trl_loss(x: dict, loss_type: str, beta: float, eps_low: float, eps_high: float) -> tuple[float, torch.Tensor]:
    logp = x["logp"].clone().requires_grad_(True)
    stub = SimpleNamespace(
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token", beta=beta,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1), loss_type=loss_type,
        epsilon_low=eps_low, epsilon_high=eps_high, use_vllm=False, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, max_completion_length=MAX_LEN, _entropy_bonus_enabled=False,
        aux_loss_enabled=False, accelerator=Accelerator(cpu=True), _metrics=defaultdict(lambda: defaultdict(list)),
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros(B, T), None),
    )
    batch = {
        "prompt_ids": torch.ones(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.ones(B, T, dtype=torch.long), "completion_mask": x["mask"],
        "advantages": x["adv"], "old_per_token_logps": x["old"], "ref_per_token_logps": x["ref"],
        "num_items_in_batch": x["mask"].sum(),
    }
    loss = trl_grpo().GRPOTrainer._compute_loss(stub, None, batch)
    loss.backward()
    return loss.item(), logp.grad


def our_loss(x: dict, loss_type: str, beta: float, eps_low: float, eps_high: float, **kw) -> tuple[float, torch.Tensor]:
    logp = x["logp"].clone().requires_grad_(True)
    adv = x["adv"][:, None].expand(B, T)
    loss, _ = grpo_loss(logp, x["old"], adv, x["mask"].bool(), eps_low=eps_low, eps_high=eps_high, beta=beta,
                        ref_logp_t=x["ref"] if beta > 0 else None, loss_type=loss_type, max_len=MAX_LEN, **kw)
    loss.backward()
    return loss.item(), logp.grad


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_same_loss_and_gradient_as_trl(loss_type, beta):
    x = inputs()
    ours, g_ours = our_loss(x, loss_type, beta, 0.2, 0.28)
    theirs, g_theirs = trl_loss(x, loss_type, beta, 0.2, 0.28)
    assert ours == pytest.approx(theirs, abs=1e-6)
    torch.testing.assert_close(g_ours, g_theirs, atol=1e-6, rtol=0)


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_trl_dapo_is_our_token_mean_over_the_whole_batch(beta):
    """DAPO divides the token sum by the generation batch's token count: our bnpo given that count."""
    x = inputs(1)
    ours, g_ours = our_loss(x, "bnpo", beta, 0.2, 0.28, num_tokens=x["mask"].sum())
    theirs, g_theirs = trl_loss(x, "dapo", beta, 0.2, 0.28)
    assert ours == pytest.approx(theirs, abs=1e-6)
    torch.testing.assert_close(g_ours, g_theirs, atol=1e-6, rtol=0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_same_token_log_probs_and_gradients_as_trls_scoring(temperature):
    """TRL's own scoring (its fused LM head, logits / temperature) and our policy on the same
    sampled completions, one prompt left-padded: the same per-token log-probs and parameter
    gradients, so with the loss test above the two trainers take the same update from the same batch."""
    import copy

    from trl.trainer import add_fused_lm_head

    from grpo_seq import CausalLMPolicy, LMGroupSampler
    from tiny_lm import make_tiny_lm

    model, tok = make_tiny_lm()
    rows = [{"prompt": [{"role": "user", "content": "say " + "!" * (5 * i)}], "answer": str(i)} for i in range(4)]
    policy = CausalLMPolicy(model, tok)
    torch.manual_seed(7)
    batch = LMGroupSampler(tok, rows, num_groups=2, num_generations=3, max_completion_length=8,
                           temperature=temperature).sample(policy)
    assert not bool(batch.prompt_mask.all())  # the shorter prompt is left-padded
    theirs_model = copy.deepcopy(model)
    add_fused_lm_head(theirs_model, temperature=temperature)

    mask = batch.mask
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1)) * mask

    def grads(m):
        return [p.grad.clone() for p in m.parameters()]

    logp, _ = policy(batch)
    (logp * weights).sum().backward()
    ids = torch.cat([batch.context, batch.tokens], 1)
    att = torch.cat([batch.prompt_mask.long(), mask.long()], 1)
    keep = batch.tokens.shape[1]
    labels = ids.masked_fill(att == 0, -100)
    labels[:, :-keep] = -100
    trl_logp = theirs_model(input_ids=ids, attention_mask=att, labels=labels, fused_lm_head=True).log_probs[:, -keep:]
    (trl_logp * weights).sum().backward()
    torch.testing.assert_close(logp[mask], trl_logp[mask], atol=1e-5, rtol=0)
    for ours, trls in zip(grads(model), grads(theirs_model)):
        torch.testing.assert_close(ours, trls, atol=1e-5, rtol=1e-4)
