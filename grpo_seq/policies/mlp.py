"""A categorical MLP policy over a discrete action space: actions are its tokens."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import Tensor, nn

from ..batch import RolloutBatch
from ..objective import token_entropy, token_logprobs

__all__ = ["CategoricalMLPPolicy"]

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
# In place: a rollout calls the actor at every env step, where each new array costs ~1 us.
_NUMPY_ACTIVATIONS = {"tanh": lambda x: np.tanh(x, out=x), "relu": lambda x: np.maximum(x, 0.0, out=x)}


class CategoricalMLPPolicy(nn.Module):
    """``pi(a | o) = softmax(MLP(o))``; the context of action token t is observation t.

    ``forward(batch)`` scores a :class:`RolloutBatch` (what the trainer calls, so a DDP wrapper
    sees the call); :meth:`act` samples or picks greedy actions while rolling out.
    """

    def __init__(self, obs_dim: int, num_actions: int, hidden_sizes: tuple[int, ...] = (64, 64), activation: str = "tanh"):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.init_kwargs = {
            "obs_dim": obs_dim,
            "num_actions": num_actions,
            "hidden_sizes": list(hidden_sizes),
            "activation": activation,
        }
        layers: list[nn.Module] = []
        width = obs_dim
        for h in hidden_sizes:
            layers += [nn.Linear(width, h), _ACTIVATIONS[activation]()]
            width = h
        head = nn.Linear(width, num_actions)
        # A near-uniform initial policy: every action is tried from the start (as in PPO's
        # orthogonal init with gain 0.01 on the policy head).
        nn.init.orthogonal_(head.weight, gain=0.01)
        nn.init.zeros_(head.bias)
        self.net = nn.Sequential(*layers, head)

    def logits(self, obs: Tensor) -> Tensor:
        return self.net(obs)

    def forward(self, batch: RolloutBatch, with_entropy: bool = True) -> tuple[Tensor, Tensor | None]:
        """Per-token log-probs and entropies ``(B, T)`` of the batch's actions."""
        logits = self.net(batch.context)
        return token_logprobs(logits, batch.tokens), token_entropy(logits) if with_entropy else None

    @torch.no_grad()
    def act(self, obs: Tensor, generator: torch.Generator | None = None, greedy: bool = False) -> Tensor:
        logits = self.net(obs)
        if greedy:
            return logits.argmax(-1)
        # Gumbel-max draws from softmax(logits) with one uniform per action, no normalising.
        u = torch.rand(logits.shape, generator=generator, dtype=logits.dtype, device=logits.device)
        return (logits - torch.log(-torch.log(u.clamp_min(1e-20)))).argmax(-1)

    def numpy_actor(self, rng: np.random.Generator | None = None, greedy: bool = False) -> Callable[[np.ndarray], np.ndarray]:
        """Actions for a batch of observations from a numpy snapshot of the current weights.

        A rollout calls the network once per env step on a few rows, where torch's per-call
        overhead is several times the arithmetic; numpy's is a fraction of it. Samples are
        Gumbel-max draws from ``rng`` (the same distribution as :meth:`act`); rebuild the actor
        after every update, it does not follow the parameters.
        """
        if not greedy and rng is None:
            raise ValueError("numpy_actor: sampling needs an rng (or greedy=True)")
        layers = [(m.weight.detach().cpu().numpy().T.copy(), m.bias.detach().cpu().numpy().copy())
                  for m in self.net if isinstance(m, nn.Linear)]
        hidden, (w_out, b_out) = layers[:-1], layers[-1]
        activation = _NUMPY_ACTIVATIONS[self.init_kwargs["activation"]]

        def act(obs: np.ndarray) -> np.ndarray:
            h = obs
            for w, b in hidden:
                h = h @ w
                h += b
                activation(h)
            logits = h @ w_out
            logits += b_out
            if not greedy:
                logits = logits + rng.gumbel(size=logits.shape)
            return logits.argmax(-1)

        return act
