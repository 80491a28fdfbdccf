"""Log-probs of the chosen tokens straight from the last hidden states: the LM head, the
log-softmax, the gather and the entropy in one pass over the logits.

Written out by autograd, ``log_softmax(h @ W.T).gather(tokens)`` walks the ``(N, V)`` logits
about ten times (cast, max, subtract, exp, sum, the zero-filled gradient, its scatter, the
softmax of the backward, ...), and each walk of 1,024 x 49k floats reads 200 MB from memory.
Here the logits are made by one matrix product and then visited once, a few rows at a time
while they sit in cache, leaving the softmax probabilities in their place; the backward turns
those into the logits' gradient in one more visit, ``(onehot - p) * g``, before the two
matrix products. Same values and gradients (tested to 1e-6 in float32).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["head_logprobs"]

# Bytes of float32 logits visited at once. On a CPU, well inside a core's L2. On a GPU each
# chunk costs a handful of kernel launches whatever its size, and the launches of L2-sized
# chunks (a few rows of a large vocabulary) would outlast the arithmetic many times over.
_CHUNK_BYTES = {"cpu": 1 << 20, "other": 1 << 28}


class _HeadLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, tokens: Tensor,
                with_entropy: bool, temperature: float) -> tuple[Tensor, Tensor]:
        # addmm as nn.Linear does: in 16-bit, adding the bias after rounding would differ.
        logits = torch.mm(hidden, weight.t()) if bias is None else torch.addmm(bias, hidden, weight.t())
        N, V = logits.shape
        keep = any(ctx.needs_input_grad[:3])
        logp = torch.empty(N, dtype=torch.float32, device=logits.device)
        entropy = torch.empty(N if with_entropy else 0, dtype=torch.float32, device=logits.device)
        rows = max(1, _CHUNK_BYTES["cpu" if logits.device.type == "cpu" else "other"] // (4 * V))
        for s in range(0, N, rows):
            chunk = logits[s:s + rows]
            lf = chunk.float()  # a view in float32, a small copy in 16-bit
            if temperature != 1.0:
                lf /= temperature
            lf -= torch.logsumexp(lf, -1, keepdim=True)  # log-probs
            logp[s:s + rows] = lf.gather(1, tokens[s:s + rows, None]).squeeze(1)
            if with_entropy or keep:
                p = lf.exp()
                if with_entropy:
                    entropy[s:s + rows] = -(p * lf).sum(-1)
                if keep:
                    chunk.copy_(p)
        ctx.mark_non_differentiable(entropy)
        if keep:
            ctx.save_for_backward(hidden, weight, tokens, logits)
            ctx.has_bias = bias is not None
            ctx.temperature = temperature
            ctx.spent = False
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: Tensor, _grad_entropy: Tensor):
        if ctx.spent:
            raise RuntimeError("head_logprobs: a second backward through the same graph is not supported "
                               "(its saved probabilities became the gradient)")
        ctx.spent = True
        hidden, weight, tokens, probs = ctx.saved_tensors
        g = grad_logp.float() / ctx.temperature
        grad = probs  # d logp_i / d logits_i = (onehot(token_i) - p_i) / T, times g_i, in place
        grad.mul_(-g.to(grad.dtype)[:, None])
        grad.index_put_((torch.arange(len(tokens), device=grad.device), tokens), g.to(grad.dtype), accumulate=True)
        grad_hidden = grad @ weight if ctx.needs_input_grad[0] else None
        grad_weight = grad.t() @ hidden if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_hidden, grad_weight, grad_bias, None, None, None


def head_logprobs(hidden: Tensor, weight: Tensor, tokens: Tensor, bias: Tensor | None = None,
                  with_entropy: bool = False, temperature: float = 1.0) -> tuple[Tensor, Tensor | None]:
    """``log softmax((hidden @ weight.T + bias) / temperature)[token]`` and, when asked, the
    entropy of that distribution, per row.

    ``hidden`` ``(..., H)``, ``weight`` ``(V, H)``, ``tokens`` ``(...)``; returns float32
    ``(...)`` log-probs (differentiable in ``hidden``, ``weight`` and ``bias``) and the entropy
    (detached) or None. Under autocast to a 16-bit dtype the product runs in that dtype, as
    ``nn.Linear`` would, and the softmax in float32. One backward per graph.
    """
    shape = tokens.shape
    device = hidden.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
    if dtype not in (torch.float16, torch.bfloat16):
        dtype = hidden.dtype
    h = hidden.reshape(-1, hidden.shape[-1]).to(dtype)
    w = weight.to(dtype)
    b = bias.to(dtype) if bias is not None else None
    with torch.autocast(device, enabled=False):
        logp, entropy = _HeadLogProbs.apply(h, w, b, tokens.reshape(-1).long(), with_entropy, float(temperature))
    return logp.view(shape), entropy.view(shape) if with_entropy else None
