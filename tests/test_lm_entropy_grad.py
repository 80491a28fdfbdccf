"""A language model's token entropy with a gradient: asked for by the trainer when the objective
has an entropy term, computed from the same logits as the log-probs, equal in value and gradient
to the entropy of the full logits; without an entropy term the entropy stays a detached statistic."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from grpo_seq import LoopConfig, GRPOLoop
from grpo_seq.policies import causal_lm
from grpo_seq.policies.causal_lm import CausalLMPolicy
from grpo_seq.scoring.rewards import RewardScorer
from tiny_lm import length_reward, make_sampler, make_tiny_lm

ACC = Accelerator(cpu=True)


def _batch(temperature: float):
    model, tok = make_tiny_lm(seed=0)
    torch.manual_seed(0)
    batch = make_sampler(tok, temperature=temperature).sample(CausalLMPolicy(model, tok))
    return model, tok, batch


def _reference_entropy(model, batch) -> torch.Tensor:
    """``H_t = sum_v entr(p_v)``, ``entr(p) = -p log p``, ``p = softmax(logits_t / T)``, from the
    model's full logits over prompt + completion (one plain forward, no chunking, no fused head)."""
    ids = torch.cat([batch.context, batch.tokens], dim=1)
    attention = torch.cat([batch.prompt_mask.long(), torch.ones_like(batch.tokens)], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits
    # position P - 1 + t predicts completion token t
    P = batch.context.shape[1]
    scaled = logits[:, P - 1:-1].float() / float(batch.temperature)
    return torch.special.entr(torch.softmax(scaled, dim=-1)).sum(-1)


@pytest.mark.parametrize("fused", [True, False], ids=["fused-head", "full-logits"])
@pytest.mark.parametrize("share_prompt", [True, False], ids=["shared-prompt", "whole-rows"])
def test_entropy_gradient_equals_the_full_logits_reference(fused, share_prompt):
    model, tok, batch = _batch(temperature=0.7)
    policy = CausalLMPolicy(model, tok, share_prompt=share_prompt)
    if not fused:
        policy._body_and_head = lambda: None  # the model's own forward and its (B, T, V) logits
    assert policy._body_and_head() is not None or not fused
    policy.enable_entropy_grad()
    mask = batch.mask.float()
    logp, entropy = policy(batch)
    (entropy * mask).sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    reference = _reference_entropy(model, batch)
    (reference * mask).sum().backward()
    # the same sums in another order: equal to a few float32 ulps of entropies up to log V
    torch.testing.assert_close(entropy * mask, reference * mask, atol=1e-6, rtol=1e-6)
    for g, want in zip(got, (p.grad for p in model.parameters())):
        torch.testing.assert_close(g, want, atol=1e-6, rtol=1e-6)
    assert any(float(g.abs().max()) > 1e-4 for g in got)  # a real gradient, not zeros on both sides
    # the log-probs are the no-grad path's log-probs (same logits, same temperature)
    plain = CausalLMPolicy(model, tok, share_prompt=share_prompt)
    if not fused:
        plain._body_and_head = lambda: None
    torch.testing.assert_close(logp.detach() * mask, plain(batch)[0].detach() * mask, atol=1e-6, rtol=1e-6)


def _trainer(**overrides) -> GRPOLoop:
    model, tok = make_tiny_lm(seed=0)
    cfg = LoopConfig(num_groups=2, num_generations=4, learning_rate=1e-2, beta=0.0, seed=0, **overrides)
    return GRPOLoop(cfg, CausalLMPolicy(model, tok), make_sampler(tok, seed=0), ACC,
                       score_fn=RewardScorer([length_reward]))


def test_defaults_keep_the_detached_entropy_and_an_entropy_coef_changes_the_step(monkeypatch):
    for name, opts in {"token mean": {"ent_coef": 0.5, "ent_mean": "token"}, "ent_coef": {"ent_coef": 0.5},
                       "adaptive": {"use_adaptive_entropy": True, "ent_mean": "token"}}.items():
        assert _trainer(**opts).policy.entropy_has_grad is True, name  # asked for, not refused
    calls = []
    graded = causal_lm._logprobs_and_entropy
    monkeypatch.setattr(causal_lm, "_logprobs_and_entropy", lambda *a: calls.append(1) or graded(*a))
    plain = _trainer()
    m0 = plain.step()
    assert calls == [] and plain.policy.entropy_has_grad is False  # defaults: today's detached path only
    with torch.enable_grad():
        assert not plain.policy(plain.last_batch)[1].requires_grad
    bonus = _trainer(ent_coef=0.5, ent_mean="token")
    m1 = bonus.step()
    assert calls  # the entropy term's forward passes took the path with a gradient
    # the same seed and weights draw the same batch: only the entropy term differs
    assert m0["reward/mean"] == m1["reward/mean"] and m0["policy/entropy"] == pytest.approx(m1["policy/entropy"])
    assert m1["loss/policy"] < m0["loss/policy"]  # the bonus subtracts 0.5 * a positive mean entropy
    after = zip(plain.policy.state_dict().values(), bonus.policy.state_dict().values())
    assert max(float((a - b).abs().max()) for a, b in after) > 1e-6
