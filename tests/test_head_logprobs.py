"""The fused LM head + log-softmax + gather against the autograd formula, and the policy's use of it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from grpo_seq import CausalLMPolicy
from grpo_seq.policies.head_logprobs import head_logprobs
from grpo_seq.math.objective import grpo_loss, token_entropy, token_logprobs
from tiny_lm import make_sampler, make_tiny_lm


def reference(hidden, weight, bias, tokens):
    logits = nn.functional.linear(hidden, weight, bias)
    return token_logprobs(logits, tokens), token_entropy(logits.detach())


def leaves(seed: int, n: int = 37, h: int = 16, v: int = 70_000):
    """Enough vocabulary that one cache chunk holds a few rows: several chunks, a ragged last one."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g).requires_grad_()
    weight = (torch.randn(v, h, generator=g) * 0.3).requires_grad_()
    bias = (torch.randn(v, generator=g) * 0.1).requires_grad_()
    tokens = torch.randint(0, v, (n,), generator=g)
    upstream = torch.randn(n, generator=g)
    return hidden, weight, bias, tokens, upstream


def grads(fn, hidden, weight, bias, tokens, upstream):
    for t in (hidden, weight, bias):
        t.grad = None
    logp, entropy = fn(hidden, weight, bias, tokens)
    (logp * upstream).sum().backward()
    return logp.detach(), entropy, [t.grad.clone() for t in (hidden, weight, bias)]


def test_values_and_gradients_equal_the_autograd_formula():
    args = leaves(0)
    lp_ref, ent_ref, g_ref = grads(reference, *args)
    lp, ent, g = grads(lambda h, w, b, t: head_logprobs(h, w, t, b, with_entropy=True), *args)
    torch.testing.assert_close(lp, lp_ref, atol=1e-6, rtol=0)
    # Entropies near log(70,000) = 11.2 summed over 70,000 terms in another order: float32's ulp there
    # is about 1e-6, and which SIMD width the CPU's kernels use moves the sum by a few ulps.
    torch.testing.assert_close(ent, ent_ref, atol=1e-5, rtol=4e-6)
    for ours, theirs in zip(g, g_ref):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
    # The gradient of a row's log-prob in its own logits sums to zero: a shift of all logits changes nothing.
    assert abs(float(g[2].sum())) < 1e-4


def test_bf16_autocast_runs_the_product_in_bf16_like_linear():
    args = leaves(1, v=5_000)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lp_ref, _, g_ref = grads(reference, *args)
        lp, _, g = grads(lambda h, w, b, t: head_logprobs(h, w, t, b), *args)
    torch.testing.assert_close(lp, lp_ref, atol=1e-6, rtol=0)  # same bf16 logits, same float32 softmax
    for ours, theirs in zip(g, g_ref):
        assert ours.dtype == torch.float32  # gradients reach the float32 leaves
        torch.testing.assert_close(ours, theirs, atol=2e-2, rtol=2e-2)  # bf16 rounding of the gradient


def test_without_gradients_nothing_is_kept_and_a_second_backward_is_refused():
    hidden, weight, bias, tokens, upstream = leaves(2, v=3_000)
    with torch.no_grad():
        lp, ent = head_logprobs(hidden, weight, tokens, bias)
    assert ent is None and lp.shape == (37,)
    logp, _ = head_logprobs(hidden, weight, tokens, bias)
    (logp * upstream).sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward"):
        (logp * upstream).sum().backward()


def test_policy_log_probs_and_gradients_equal_the_models_own_logits_path(monkeypatch):
    """The fused head (Llama) against the same model scored through its full forward and logits."""
    model, tok = make_tiny_lm()
    policy = CausalLMPolicy(model, tok)
    torch.manual_seed(3)
    batch = make_sampler(tok, max_completion_length=8).sample(policy)
    batch.advantages = torch.randn(batch.batch_size, 1).expand_as(batch.mask).clone()

    def run():
        model.zero_grad()
        logp, entropy = policy(batch)
        loss, _ = grpo_loss(logp, logp.detach(), batch.advantages, batch.mask, eps_low=0.2)
        loss.backward()
        return logp[batch.mask], entropy[batch.mask], [p.grad.clone() for p in model.parameters()], logp

    assert policy._body_and_head() is not None
    fused = run()
    # Tokens after an EOS, inside the scored columns: the fused head leaves them out (0), and
    # the values and gradients below still equal the full logits path's.
    padding = ~batch.mask[:, : int(batch.mask.any(0).nonzero().max()) + 1]
    assert padding.any()
    assert torch.equal(fused[3][:, : padding.shape[1]][padding], torch.zeros(int(padding.sum())))
    monkeypatch.setattr(CausalLMPolicy, "_body_and_head", lambda self: None)
    plain = run()
    torch.testing.assert_close(fused[0], plain[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(fused[1], plain[1], atol=1e-5, rtol=0)
    for f, p in zip(fused[2], plain[2]):
        torch.testing.assert_close(f, p, atol=1e-6, rtol=1e-4)


def test_temperature_divides_the_logits_in_values_and_gradients():
    args = leaves(4, v=9_000)
    scaled = lambda h, w, b, t: reference(h, w / 0.7, b / 0.7, t)  # noqa: E731  (logits / 0.7)
    lp_ref, ent_ref, g_ref = grads(scaled, *args)
    lp, ent, g = grads(lambda h, w, b, t: head_logprobs(h, w, t, b, with_entropy=True, temperature=0.7), *args)
    torch.testing.assert_close(lp, lp_ref, atol=1e-5, rtol=0)
    # Entropies near log(70,000) = 11.2 summed over 70,000 terms in another order: float32's ulp there
    # is about 1e-6, and which SIMD width the CPU's kernels use moves the sum by a few ulps.
    torch.testing.assert_close(ent, ent_ref, atol=1e-5, rtol=4e-6)
    for ours, theirs in zip(g, g_ref):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("fused", [True, False])
def test_policy_scores_sampled_tokens_under_the_sampling_temperature(fused, monkeypatch):
    """Tokens drawn at temperature 0.7 are scored as log softmax(logits / 0.7): the log-probs of
    the distribution they came from (what the ratio and the policy gradient are about)."""
    model, tok = make_tiny_lm()
    policy = CausalLMPolicy(model, tok)
    if not fused:
        monkeypatch.setattr(CausalLMPolicy, "_body_and_head", lambda self: None)
    torch.manual_seed(5)
    batch = make_sampler(tok, max_completion_length=8, temperature=0.7).sample(policy)
    assert batch.temperature == 0.7
    with torch.no_grad():
        logp, _ = policy(batch)
        prompt, pm = batch.context, batch.prompt_mask
        ids = torch.cat([prompt, batch.tokens], 1)
        att = torch.cat([pm.long(), torch.ones_like(batch.tokens)], 1)
        logits = model(input_ids=ids, attention_mask=att, position_ids=(att.cumsum(-1) - 1).clamp(min=0)).logits
        logits = logits[:, prompt.shape[1] - 1:-1]
        at_07 = token_logprobs(logits / 0.7, batch.tokens)
        at_1 = token_logprobs(logits, batch.tokens)
    torch.testing.assert_close(logp[batch.mask], at_07[batch.mask], atol=1e-5, rtol=0)
    assert (logp[batch.mask] - at_1[batch.mask]).abs().max() > 1e-2  # temperature 1 would be another distribution
