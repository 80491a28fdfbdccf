"""A categorical MLP policy over a discrete action space: actions are its tokens."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..batch import RolloutBatch
from ..objective import token_entropy, token_logprobs

__all__ = ["CategoricalMLPPolicy"]

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
# In place: a rollout calls the actor at every env step, where each new array costs as much as the math.
_NUMPY_ACTIVATIONS = {"tanh": lambda x: np.tanh(x, out=x), "relu": lambda x: np.maximum(x, 0.0, out=x)}


class CategoricalMLPPolicy(nn.Module):
    """``pi(a | o) = softmax(MLP(o))``; the context of action token t is observation t.

    ``forward(batch)`` scores a :class:`RolloutBatch` (what the trainer calls, so a DDP wrapper
    sees the call); :meth:`act` samples or picks greedy actions while rolling out.

    Args:
        obs_scale: per-dimension divisors applied to observations before the first layer (fixed,
            saved with the policy). Adam moves every weight by about the learning rate, so the
            units of the inputs set how far one step moves the logits: a pole angle that only
            spans +-0.21 rad needs weights 10x larger than a cart position in +-2.4 m.
            ``recipes/cartpole.py`` uses CartPole's termination thresholds.
        obs_shift: per-dimension offsets subtracted before ``obs_scale`` divides (fixed, saved with
            the policy): ``(obs - obs_shift) / obs_scale``. Where what happens sits far off 0 (a
            MountainCar position in -0.7..-0.3), centring spreads the states the policy must tell
            apart across its input units instead of a narrow band of one sign.
        orthogonal_init: hidden layers initialised orthogonal with gain sqrt(2) and zero biases
            (Stable-Baselines3's and CleanRL's PPO init) instead of torch's uniform default.
    """

    # its forward's entropies are differentiable, so GRPOConfig.ent_coef can train on them
    entropy_has_grad = True

    def __init__(self, obs_dim: int, num_actions: int, hidden_sizes: tuple[int, ...] = (64, 64), activation: str = "tanh",
                 obs_scale: Sequence[float] | None = None, orthogonal_init: bool = False,
                 obs_shift: Sequence[float] | None = None):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        if obs_scale is not None:
            obs_scale = [float(x) for x in obs_scale]
            if len(obs_scale) != obs_dim or not all(math.isfinite(x) and x > 0 for x in obs_scale):
                raise ValueError(f"obs_scale must hold {obs_dim} finite positive divisors (one per observation "
                                 f"dimension), got {obs_scale}")
        if obs_shift is not None:
            obs_shift = [float(x) for x in obs_shift]
            if len(obs_shift) != obs_dim or not all(math.isfinite(x) for x in obs_shift):
                raise ValueError(f"obs_shift must hold {obs_dim} finite offsets (one per observation dimension), "
                                 f"got {obs_shift}")
        self.init_kwargs = {
            "obs_dim": obs_dim,
            "num_actions": num_actions,
            "hidden_sizes": list(hidden_sizes),
            "activation": activation,
            "obs_scale": obs_scale,
            "orthogonal_init": orthogonal_init,
            "obs_shift": obs_shift,
        }
        # Not in the state dict: it is a constructor argument, saved in policy.json.
        self.register_buffer("inv_obs_scale", None if obs_scale is None else 1.0 / torch.tensor(obs_scale),
                             persistent=False)
        self.register_buffer("obs_shift", None if obs_shift is None else torch.tensor(obs_shift), persistent=False)
        layers: list[nn.Module] = []
        width = obs_dim
        for h in hidden_sizes:
            layer = nn.Linear(width, h)
            if orthogonal_init:
                nn.init.orthogonal_(layer.weight, gain=math.sqrt(2))
                nn.init.zeros_(layer.bias)
            layers += [layer, _ACTIVATIONS[activation]()]
            width = h
        head = nn.Linear(width, num_actions)
        # A near-uniform initial policy: every action is tried from the start (as in PPO's
        # orthogonal init with gain 0.01 on the policy head).
        nn.init.orthogonal_(head.weight, gain=0.01)
        nn.init.zeros_(head.bias)
        self.net = nn.Sequential(*layers, head)

    @staticmethod
    def function_kwargs(kwargs: dict) -> dict:
        """What decides the function of given weights beyond their shapes (which loading checks):
        ``orthogonal_init`` only draws the first weights, and no scale is a scale of 1s."""
        dim = int(kwargs.get("obs_dim") or 0)
        scale, shift = kwargs.get("obs_scale"), kwargs.get("obs_shift")
        return {"activation": kwargs.get("activation"),
                "obs_scale": [1.0] * dim if scale is None else [float(x) for x in scale],
                "obs_shift": [0.0] * dim if shift is None else [float(x) for x in shift]}

    def logits(self, obs: Tensor) -> Tensor:
        if self.obs_shift is not None:
            obs = obs - self.obs_shift
        return self.net(obs if self.inv_obs_scale is None else obs * self.inv_obs_scale)

    def forward(self, batch: RolloutBatch, with_entropy: bool = True) -> tuple[Tensor, Tensor | None]:
        """Per-token log-probs and entropies ``(B, T)`` of the batch's actions."""
        logits = self.logits(batch.context)
        return token_logprobs(logits, batch.tokens), token_entropy(logits) if with_entropy else None

    @torch.no_grad()
    def act(self, obs: Tensor, generator: torch.Generator | None = None, greedy: bool = False) -> Tensor:
        logits = self.logits(obs)
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
        inv_scale = None if self.inv_obs_scale is None else self.inv_obs_scale.cpu().numpy().copy()
        shift = None if self.obs_shift is None else self.obs_shift.cpu().numpy().copy()

        def act(obs: np.ndarray) -> np.ndarray:
            h = obs if shift is None else obs - shift
            h = h if inv_scale is None else h * inv_scale
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
