"""A categorical MLP policy over a discrete action space: actions are its tokens.

A multi-dimensional discrete action (a ``MultiDiscrete(nvec)`` one, ``action_nvec``) is still one
token per decision, ``k = sum_i d_i * prod(nvec[i+1:])`` (the mixed-radix digits ``d_i``, the first
most significant), but its head is factorised as Stable-Baselines3's PPO has it: one independent
categorical per dimension, so ``log pi(k | o) = sum_i log pi_i(d_i | o)`` and the entropy is the
sum of the dimensions' entropies. The head then has ``sum(nvec)`` outputs instead of
``prod(nvec)``, and what one dimension learns is shared by every joint action that contains it.

A continuous action cut into K values per dimension (``grpo_seq.sampling.spaces``) may instead take a
Gaussian head (``action_head="gaussian"``): the network gives each dimension a mean ``mu_i`` and the
policy holds a state-independent ``log sigma_i`` (Stable-Baselines3's ``DiagGaussian``, its
``log_std_init``), both in units where the dimension's range is [-1, 1]. Dimension i takes value
``u_b = -1 + 2b/(K-1)`` with probability ``softmax_b(-(u_b - mu_i)^2 / (2 sigma_i^2))``: the Gaussian's
density at the K values, normalised over them. A draw takes a value with that probability (where
sigma is wider than the values' spacing, about the Gaussian's draw kept in bounds and rounded);
log-prob, entropy, ratio and KL are the same per-decision categorical quantities as above, so the
objective does not change. Neighbouring values share what is learned, and one ``sigma_i`` sets
how far the policy explores around its mean.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..math.batch import RolloutBatch
from ..math.objective import token_entropy, token_logprobs
from .extractor import ExtractorTorso, saved_spec
from .image_torso import ImageTorso, PartsTorso

__all__ = ["CategoricalMLPPolicy", "ACTION_HEADS", "action_digits", "join_digits", "factored_logprobs", "factored_entropy",
           "gaussian_bin_logits"]

# "categorical": one free logit per value of each dimension; "gaussian": the values' logits set by a
# mean and a standard deviation per dimension (module docstring)
ACTION_HEADS = ("categorical", "gaussian")

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
# In place: a rollout calls the actor at every env step, where each new array costs as much as the math.
_NUMPY_ACTIVATIONS = {"tanh": lambda x: np.tanh(x, out=x), "relu": lambda x: np.maximum(x, 0.0, out=x)}


def action_digits(tokens: Any, nvec: Sequence[int]) -> list[Any]:
    """The digits ``d_i`` of joint tokens (a tensor or an array), one per dimension of ``nvec``."""
    strides = [math.prod(nvec[i + 1 :]) for i in range(len(nvec))]
    return [(tokens // s) % n for s, n in zip(strides, nvec)]


def join_digits(digits: Sequence[Any], nvec: Sequence[int]) -> Any:
    """The joint token of per-dimension digits (the inverse of :func:`action_digits`)."""
    token = digits[0]
    for d, n in zip(digits[1:], nvec[1:]):
        token = token * n + d
    return token


def _slices(logits: Any, nvec: Sequence[int]) -> list[Any]:
    """The head's logits ``(..., sum(nvec))`` cut into each dimension's ``(..., n_i)``."""
    cuts = np.cumsum([0, *nvec])
    return [logits[..., a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def factored_logprobs(logits: Tensor, tokens: Tensor, nvec: Sequence[int]) -> Tensor:
    """``log pi(k | o) = sum_i log_softmax(logits_i)[d_i]`` for joint tokens ``k`` (one decision each)."""
    digits = action_digits(tokens.long(), nvec)
    return sum(token_logprobs(part, d) for part, d in zip(_slices(logits, nvec), digits))


def factored_entropy(logits: Tensor, nvec: Sequence[int]) -> Tensor:
    """The entropy of independent dimensions: the sum of each dimension's categorical entropy."""
    return sum(token_entropy(part) for part in _slices(logits, nvec))


def gaussian_bin_logits(mean: Any, log_std: Any, bins: int) -> Any:
    """``(..., dims * bins)``: ``-(u_b - mu_i)^2 / (2 sigma_i^2)`` for each dimension i's mean
    ``mean[..., i]`` and ``sigma_i = exp(log_std[i])``, at ``u_b = -1 + 2b/(bins-1)`` (tensors or
    arrays alike); a dimension's softmax over its slice is the Gaussian's density at the values,
    normalised over them."""
    lib = torch if isinstance(mean, Tensor) else np
    u = lib.linspace(-1.0, 1.0, bins, dtype=mean.dtype, **({"device": mean.device} if lib is torch else {}))
    inv_two_var = 0.5 * lib.exp(-2.0 * log_std)
    logits = -((u - mean[..., None]) ** 2) * inv_two_var[:, None]
    return logits.reshape(*mean.shape[:-1], -1)


def _factored_pick(logits: Any, nvec: Sequence[int]) -> Any:
    """The joint token of each dimension's argmax (of Gumbel-perturbed logits: a draw)."""
    return join_digits([part.argmax(-1) for part in _slices(logits, nvec)], nvec)


def _torso(image_shape: Sequence[int] | None, image_scale: float, image_features: int | None,
           obs_parts: Sequence[dict] | None, orthogonal_init: bool, extractor: dict | None = None) -> nn.Module | None:
    """The torso before the hidden layers: the user's extractor, or a convolutional one for images or
    a Dict holding them (None: none)."""
    if extractor is not None:
        torso: nn.Module = ExtractorTorso(extractor)
    elif image_shape is not None:
        torso = ImageTorso(image_shape, image_scale, image_features)
    elif obs_parts is not None:
        torso = PartsTorso(obs_parts, image_features)
    else:
        return None
    if orthogonal_init:  # SB3 initialises its feature extractor so too
        for m in torso.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.orthogonal_(m.weight, gain=math.sqrt(2))
                nn.init.zeros_(m.bias)
    return torso


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
        action_nvec: the sizes of a multi-dimensional discrete action, whose product is
            ``num_actions``: a factorised head (module docstring); None: one categorical over
            ``num_actions``.
        image_shape, image_scale: observations that are images of this shape (flattened), divided
            by ``image_scale``: a convolutional torso (:class:`~grpo_seq.policies.image_torso.ImageTorso`)
            before the hidden layers, as Stable-Baselines3's ``CnnPolicy``. Such a policy acts
            through torch (no numpy snapshot). ``image_features``: the torso's output width (None:
            the network's own, 512 or 128).
        action_head, log_std_init: ``"gaussian"``: the values of a factorised action (a continuous
            one cut into ``action_nvec`` values per dimension, all the same count) weighed by a
            Gaussian per dimension, its ``log sigma`` starting at ``log_std_init`` (module
            docstring); ``"categorical"``: one free logit per value.
        obs_parts: a Dict observation holding images, as its flat parts in key order (each a dict of
            ``size`` and, for an image, ``image_shape`` and ``scale``): each image part through its
            own convolutional torso of ``image_features`` outputs (256 by default), the rest as it
            is (:class:`~grpo_seq.policies.image_torso.PartsTorso`, SB3's ``CombinedExtractor``).
        extractor: a feature extractor of the user's own as the torso, in place of the above
            (:class:`~grpo_seq.policies.extractor.ExtractorTorso`: its class's import path, keyword
            arguments and the observation space it reads).
    """

    # its forward's entropies are differentiable, so LoopConfig.ent_coef can train on them
    entropy_has_grad = True
    # a token's log-prob reads its own observation only: the trainer may score a minibatch of env
    # steps as that many one-step outputs instead of running every episode forward under a mask
    scores_steps_independently = True

    def __init__(self, obs_dim: int, num_actions: int, hidden_sizes: tuple[int, ...] = (64, 64), activation: str = "tanh",
                 obs_scale: Sequence[float] | None = None, orthogonal_init: bool = False,
                 obs_shift: Sequence[float] | None = None, action_nvec: Sequence[int] | None = None,
                 image_shape: Sequence[int] | None = None, image_scale: float = 1.0, image_features: int | None = None,
                 obs_parts: Sequence[dict] | None = None, action_head: str = "categorical",
                 log_std_init: float = 0.0, extractor: dict | None = None):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        obs_scale, obs_shift = _check_units(obs_dim, obs_scale, obs_shift)
        self.init_kwargs = {
            "obs_dim": obs_dim,
            "num_actions": num_actions,
            "hidden_sizes": list(hidden_sizes),
            "activation": activation,
            "obs_scale": obs_scale,
            "orthogonal_init": orthogonal_init,
            "obs_shift": obs_shift,
        }
        self.action_nvec = _check_nvec(action_nvec, num_actions)
        if self.action_nvec is not None:  # only then: a one-categorical policy's policy.json is as before
            self.init_kwargs["action_nvec"] = self.action_nvec
        self.action_head = _check_head(action_head, self.action_nvec)
        if self.action_head == "gaussian":  # only then: a categorical policy's policy.json is as before
            self.init_kwargs.update(action_head=action_head, log_std_init=float(log_std_init))
            # SB3's DiagGaussian: one log sigma per dimension, whatever the observation
            self.log_std = nn.Parameter(torch.full((len(self.action_nvec),), float(log_std_init)))
        if image_shape is not None:
            self.init_kwargs.update(image_shape=[int(d) for d in image_shape], image_scale=float(image_scale))
        if obs_parts is not None:
            self.init_kwargs["obs_parts"] = [dict(p) for p in obs_parts]
        if image_features and (image_shape is not None or obs_parts is not None):  # only then: policy.json as before
            self.init_kwargs["image_features"] = int(image_features)
        # Not in the state dict: it is a constructor argument, saved in policy.json.
        self.register_buffer("inv_obs_scale", None if obs_scale is None else 1.0 / torch.tensor(obs_scale),
                             persistent=False)
        self.register_buffer("obs_shift", None if obs_shift is None else torch.tensor(obs_shift), persistent=False)
        if extractor is not None:  # only then: policy.json as before
            self.init_kwargs["extractor"] = saved_spec(extractor)
        torso = _torso(image_shape, image_scale, image_features, obs_parts, orthogonal_init, extractor)
        self.numpy_acting = torso is None  # a numpy snapshot covers linear layers only
        if self.action_head == "gaussian":  # a mean per dimension
            outputs = len(self.action_nvec)
        else:
            outputs = num_actions if self.action_nvec is None else sum(self.action_nvec)
        self.net = _network(obs_dim, torso, hidden_sizes, activation, orthogonal_init, outputs)

    @staticmethod
    def function_kwargs(kwargs: dict) -> dict:
        """What decides the function of given weights beyond their shapes (which loading checks):
        ``orthogonal_init`` only draws the first weights, and no scale is a scale of 1s."""
        dim = int(kwargs.get("obs_dim") or 0)
        scale, shift = kwargs.get("obs_scale"), kwargs.get("obs_shift")
        return {"activation": kwargs.get("activation"),
                "obs_scale": [1.0] * dim if scale is None else [float(x) for x in scale],
                "obs_shift": [0.0] * dim if shift is None else [float(x) for x in shift],
                "action_nvec": kwargs.get("action_nvec"), "image_scale": kwargs.get("image_scale"),
                "obs_parts": kwargs.get("obs_parts"), "action_head": kwargs.get("action_head", "categorical")}

    def set_obs_units(self, shift: Sequence[float], scale: Sequence[float]) -> None:
        """Observations seen as ``(obs - shift) / scale`` from now on, saved with the policy (a running
        normalisation moves them between updates: ``grpo_seq.jobs.obs_norm``)."""
        if "image_shape" in self.init_kwargs or "obs_parts" in self.init_kwargs:
            raise ValueError("set_obs_units: this policy reads images, whose pixels it scales itself")
        scale, shift = _check_units(self.init_kwargs["obs_dim"], scale, shift)
        device = self.net[0].weight.device
        self.inv_obs_scale = 1.0 / torch.tensor(scale, device=device)
        self.obs_shift = torch.tensor(shift, device=device)
        self.init_kwargs.update(obs_scale=scale, obs_shift=shift)

    @property
    def uniform_entropy(self) -> float:
        """Nats per token of a policy choosing uniformly: log K, the mean over dimensions of a
        factorised action (the divergence guard's measure of a policy that still explores)."""
        nvec = self.action_nvec or [self.init_kwargs["num_actions"]]
        return sum(math.log(n) for n in nvec) / len(nvec)

    def logits(self, obs: Tensor) -> Tensor:
        """``(..., sum(nvec))`` (or ``num_actions``): each value's logit, per dimension."""
        if self.obs_shift is not None:
            obs = obs - self.obs_shift
        out = self.net(obs if self.inv_obs_scale is None else obs * self.inv_obs_scale)
        if self.action_head == "gaussian":
            return gaussian_bin_logits(out, self.log_std, self.action_nvec[0])
        return out

    def forward(self, batch: RolloutBatch, with_entropy: bool = True) -> tuple[Tensor, Tensor | None]:
        """Per-token log-probs and entropies ``(B, T)`` of the batch's actions."""
        logits = self.logits(batch.context)
        nvec = self.action_nvec
        if nvec is not None:
            entropy = factored_entropy(logits, nvec) if with_entropy else None
            return factored_logprobs(logits, batch.tokens, nvec), entropy
        return token_logprobs(logits, batch.tokens), token_entropy(logits) if with_entropy else None

    @torch.no_grad()
    def act(self, obs: Tensor, generator: torch.Generator | None = None, greedy: bool = False) -> Tensor:
        logits = self.logits(obs)
        pick = (lambda x: x.argmax(-1)) if self.action_nvec is None else (lambda x: _factored_pick(x, self.action_nvec))
        if greedy:
            return pick(logits)
        # Gumbel-max draws from softmax(logits) with one uniform per action, no normalising
        # (per dimension of a factorised head: each slice's argmax is its own draw).
        u = torch.rand(logits.shape, generator=generator, dtype=logits.dtype, device=logits.device)
        return pick(logits - torch.log(-torch.log(u.clamp_min(1e-20))))

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
        nvec = self.action_nvec
        shift = None if self.obs_shift is None else self.obs_shift.cpu().numpy().copy()
        log_std = self.log_std.detach().cpu().numpy().copy() if self.action_head == "gaussian" else None

        def act(obs: np.ndarray) -> np.ndarray:
            h = obs if shift is None else obs - shift
            h = h if inv_scale is None else h * inv_scale
            for w, b in hidden:
                h = h @ w
                h += b
                activation(h)
            logits = h @ w_out
            logits += b_out
            if log_std is not None:
                logits = gaussian_bin_logits(logits, log_std, nvec[0])
            if not greedy:
                logits = logits + rng.gumbel(size=logits.shape)
            return logits.argmax(-1) if nvec is None else _factored_pick(logits, nvec)

        return act


def _network(obs_dim: int, torso: nn.Module | None, hidden_sizes: Sequence[int], activation: str,
             orthogonal_init: bool, outputs: int) -> nn.Sequential:
    """The torso (if any), the hidden layers and the head."""
    layers: list[nn.Module] = [] if torso is None else [torso]
    width = obs_dim if torso is None else torso.features
    for h in hidden_sizes:
        layer = nn.Linear(width, h)
        if orthogonal_init:
            nn.init.orthogonal_(layer.weight, gain=math.sqrt(2))
            nn.init.zeros_(layer.bias)
        layers += [layer, _ACTIVATIONS[activation]()]
        width = h
    head = nn.Linear(width, outputs)
    # A near-uniform initial policy: every action is tried from the start (as in PPO's
    # orthogonal init with gain 0.01 on the policy head; a Gaussian's means start near 0).
    nn.init.orthogonal_(head.weight, gain=0.01)
    nn.init.zeros_(head.bias)
    return nn.Sequential(*layers, head)


def _check_units(obs_dim: int, obs_scale: Sequence[float] | None,
                 obs_shift: Sequence[float] | None) -> tuple[list[float] | None, list[float] | None]:
    """``obs_scale`` and ``obs_shift`` as floats, one per observation dimension (scales finite and > 0)."""
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
    return obs_scale, obs_shift


def _check_head(action_head: str, nvec: list[int] | None) -> str:
    if action_head not in ACTION_HEADS:
        raise ValueError(f"action_head must be one of {', '.join(ACTION_HEADS)}, got {action_head!r}")
    if action_head == "gaussian" and (nvec is None or len(set(nvec)) != 1 or nvec[0] < 2):
        raise ValueError("action_head gaussian weighs the values of a continuous action cut into the same number "
                         f"of values per dimension (action_nvec), got action_nvec {nvec}")
    return action_head


def _check_nvec(action_nvec: Sequence[int] | None, num_actions: int) -> list[int] | None:
    if action_nvec is None:
        return None
    nvec = [int(n) for n in action_nvec]
    if not nvec or min(nvec) < 1 or math.prod(nvec) != num_actions:
        raise ValueError(f"action_nvec must hold positive sizes whose product is num_actions ({num_actions}), "
                         f"got {list(action_nvec)}")
    return nvec
