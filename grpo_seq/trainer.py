"""The GRPO loop under accelerate: sample -> score -> advantages -> mu updates -> log.

The trainer never looks inside the batch beyond tokens, mask, rewards and groups: a policy
scores its own batch (``policy(batch) -> (logp_t, entropy_t)``), a sampler draws it, so the same
loop trains a language model or a CartPole agent.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Callable

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import Tensor, nn

from .advantages import broadcast_outcome, outcome_advantages, process_advantages, stepwise_return_advantages
from .batch import RolloutBatch
from .config import GRPOConfig
from .metrics import JsonlLogger
from .objective import aggregate, grpo_loss
from .sampling.base import GroupSampler
from .serialization import save_policy

__all__ = ["GRPOTrainer", "compute_advantages"]

ScoreFn = Callable[[RolloutBatch], RolloutBatch]


def compute_advantages(batch: RolloutBatch, config: GRPOConfig) -> Tensor:
    """Per-token advantages ``(B, T)`` of a group-major batch, as ``config.advantage`` says."""
    G, mask = batch.group_size, batch.mask
    if config.advantage == "outcome":
        adv = outcome_advantages(batch.rewards.reshape(-1, G), config.scale_rewards).reshape(-1)
        return broadcast_outcome(adv, mask.float())
    if batch.step_rewards is None:
        raise ValueError(f"GRPOConfig.advantage={config.advantage!r} needs per-step rewards; this sampler gives none")
    shape = (batch.num_groups, G, mask.shape[-1])
    r_t, m_t = batch.step_rewards.reshape(shape), mask.reshape(shape)
    if config.advantage == "process":
        adv_t = process_advantages(r_t, m_t)
    else:
        adv_t = stepwise_return_advantages(r_t, m_t, config.gamma, config.scale_rewards)
    return adv_t.reshape(mask.shape)


class GRPOTrainer:
    """Trains ``policy`` with GRPO on groups drawn by ``sampler``.

    Args:
        config: the hyper-parameters.
        policy: an ``nn.Module`` whose ``forward(batch)`` returns per-token log-probs and
            entropies ``(B, T)`` of ``batch.tokens``; the sampler calls whatever it needs on it.
        sampler: a :class:`GroupSampler`; on several processes each has its own (seeded apart),
            so every process samples whole groups and group statistics never cross processes.
        accelerator: built with defaults when omitted.
        score_fn: fills ``batch.rewards`` (reward functions for text); omitted when the sampler
            already knows the rewards (an environment).
    """

    def __init__(
        self,
        config: GRPOConfig,
        policy: nn.Module,
        sampler: GroupSampler,
        accelerator: Accelerator | None = None,
        score_fn: ScoreFn | None = None,
    ):
        if sampler.group_size != config.num_generations or sampler.num_groups != config.num_groups:
            raise ValueError(
                f"sampler draws {sampler.num_groups} groups of {sampler.group_size} but GRPOConfig says "
                f"num_groups={config.num_groups}, num_generations={config.num_generations}"
            )
        self.config, self.sampler, self.score_fn = config, sampler, score_fn
        self.accelerator = accelerator or Accelerator()
        set_seed(config.seed)
        self.shuffle_gen = torch.Generator().manual_seed(config.seed)
        # No reference at all with beta = 0: nothing to load, nothing to run.
        self.ref_policy = None
        if config.beta > 0:
            self.ref_policy = copy.deepcopy(policy).requires_grad_(False).eval().to(self.accelerator.device)
        optimizer = torch.optim.AdamW(
            policy.parameters(), lr=config.learning_rate, eps=config.adam_eps, weight_decay=config.weight_decay
        )
        self.model, self.optimizer = self.accelerator.prepare(policy, optimizer)
        self.step_count = 0
        self.env_steps = 0
        self.output_dir = Path(config.output_dir) if config.output_dir else None
        self.logger = None
        if self.output_dir is not None and self.accelerator.is_main_process:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            (self.output_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
            self.logger = JsonlLogger(self.output_dir / "metrics.jsonl")

    @property
    def policy(self) -> nn.Module:
        """The bare policy (without a DDP wrapper), for sampling, evaluation and saving."""
        return self.accelerator.unwrap_model(self.model)

    def _set_lr(self, progress: float | None) -> float:
        lr = self.config.learning_rate
        if self.config.lr_schedule == "linear" and progress is not None:
            lr *= max(0.0, 1.0 - progress)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        return lr

    def step(self, progress: float | None = None) -> dict[str, float]:
        """One iteration: sample groups, score, compute advantages, ``mu`` update passes.

        Args:
            progress: fraction of the run done, in [0, 1]; drives ``lr_schedule='linear'``.

        Returns the step's metrics (averaged over processes), also appended to metrics.jsonl.
        """
        cfg, acc = self.config, self.accelerator
        t0 = time.perf_counter()
        self.model.eval()
        batch = self.sampler.sample(self.policy)
        if self.score_fn is not None:
            batch = self.score_fn(batch)
        batch = batch.to(acc.device)
        t_sample = time.perf_counter() - t0

        batch.advantages = compute_advantages(batch, cfg)
        n_updates = cfg.mu * cfg.num_minibatches
        with torch.no_grad():
            if self.ref_policy is not None:
                batch.ref_logp, _ = self.ref_policy(batch)
            if n_updates > 1:  # with one update pi_old is pi_theta: its log-probs are the current ones, detached
                batch.old_logp, _ = self.model(batch)

        lr = self._set_lr(progress)
        self.model.train()
        B, T = batch.batch_size, batch.tokens.shape[1]
        mb = B // cfg.num_minibatches
        sums: dict[str, float] = {}
        grad_norm = torch.zeros(())
        for _ in range(cfg.mu):
            order = torch.randperm(B, generator=self.shuffle_gen) if cfg.num_minibatches > 1 else torch.arange(B)
            for k in range(cfg.num_minibatches):
                sub = batch.select(order[k * mb : (k + 1) * mb].to(acc.device))
                logp_t, entropy_t = self.model(sub)
                old_logp_t = sub.old_logp if sub.old_logp is not None else logp_t.detach()
                loss, stats = grpo_loss(
                    logp_t, old_logp_t, sub.advantages, sub.mask,
                    eps_low=cfg.epsilon, eps_high=cfg.epsilon_high, beta=cfg.beta,
                    ref_logp_t=sub.ref_logp, loss_type=cfg.loss_type, max_len=T,
                )
                acc.backward(loss)
                if cfg.max_grad_norm > 0:
                    grad_norm = acc.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                stats["loss"] = loss.detach()
                stats["entropy"] = aggregate(entropy_t.detach(), sub.mask, "bnpo")
                stats["grad_norm"] = torch.as_tensor(grad_norm).detach().float()
                for name, v in stats.items():
                    sums[name] = sums.get(name, 0.0) + float(v)
        self.step_count += 1
        if cfg.ref_sync_steps and self.ref_policy is not None and self.step_count % cfg.ref_sync_steps == 0:
            self.ref_policy.load_state_dict(self.policy.state_dict())

        # Per-output values are gathered (exact std and max over all processes); loss statistics
        # are averaged.
        rewards = acc.gather(batch.rewards.float().contiguous())
        lengths = acc.gather(batch.lengths().float().contiguous())
        grouped = rewards.reshape(-1, batch.group_size)
        update_stats = acc.reduce(torch.tensor([v / n_updates for v in sums.values()], device=acc.device), "mean")
        names = {"loss": "loss/policy", "kl": "policy/kl", "clip_fraction": "policy/clip_fraction",
                 "ratio": "policy/ratio", "entropy": "policy/entropy", "grad_norm": "loss/grad_norm"}
        metrics = {
            "reward/mean": rewards.mean(), "reward/std": rewards.std(), "reward/group_std": grouped.std(dim=1).mean(),
            "reward/zero_std_groups": (grouped.amax(1) == grouped.amin(1)).float().mean(),
            "policy/completion_length": lengths.mean(), "policy/completion_length_max": lengths.max(),
            **{names[k]: v for k, v in zip(sums, update_stats)},
        }
        metrics = {k: float(v) for k, v in metrics.items()}
        tokens = int(lengths.sum())
        self.env_steps += tokens
        seconds = time.perf_counter() - t0
        metrics.update({
            "step": self.step_count, "tokens_total": self.env_steps, "perf/lr": lr,
            "perf/step_seconds": seconds, "perf/sample_seconds": t_sample,
            "perf/tokens_per_second": tokens / seconds,
            "perf/samples_per_second": batch.batch_size * acc.num_processes / seconds,
        })
        self.log(metrics)
        return metrics

    def log(self, metrics: dict[str, float]) -> None:
        """Append a row to metrics.jsonl (main process only)."""
        if self.logger is not None:
            self.logger.log(metrics)

    def save(self, directory: str | Path | None = None) -> Path | None:
        """Save the policy (safetensors) to ``directory`` (default ``<output_dir>/policy``)."""
        directory = Path(directory) if directory else (self.output_dir / "policy" if self.output_dir else None)
        if directory is None:
            raise ValueError("GRPOTrainer.save needs a directory when GRPOConfig.output_dir is None")
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            save_policy(self.policy, directory)
        return directory

    def close(self) -> None:
        if self.logger is not None:
            self.logger.close()
