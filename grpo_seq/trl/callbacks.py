"""transformers ``TrainerCallback``s called from grpo-seq's loop, with TRL's state and log names."""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["CallbackRunner", "reward_stats", "trl_logs"]


def trl_logs(window: Sequence[dict], scorer_names: Sequence[str], epoch: float) -> dict[str, float]:
    """The mean of a logging window's metrics under TRL's names (``reward``, ``reward_std``,
    ``rewards/<fn>/mean``, ``kl``, ``loss``, ``learning_rate``, ``completions/mean_length``,
    ``epoch``) and grpo-seq's own."""
    keys = {k for m in window for k in m if k != "step" and isinstance(m[k], (int, float))}
    mean = {k: sum(m[k] for m in window if k in m) / sum(k in m for m in window) for k in keys}
    logs = {
        "loss": mean.get("loss/policy", 0.0), "grad_norm": mean.get("loss/grad_norm", 0.0),
        # TRL's policy_loss is the loss before the entropy_coef term, its entropy the token mean
        "policy_loss": mean.get("loss/policy", 0.0) + mean.get("loss/entropy_bonus", 0.0),
        **({"entropy": mean["policy/entropy"]} if "policy/entropy" in mean else {}),
        **({"entropy_coef": mean["policy/entropy_coef"]} if "policy/entropy_coef" in mean else {}),
        "learning_rate": mean.get("perf/lr", 0.0), "reward": mean["reward/mean"], "reward_std": mean["reward/std"],
        "kl": mean.get("policy/kl", 0.0), "completions/mean_length": mean["policy/completion_length"],
        "frac_reward_zero_std": mean["reward/zero_std_groups"],
        **{f"rewards/{n}/mean": mean[f"reward/{n}"] for n in scorer_names if f"reward/{n}" in mean},
        **{k: v for k, v in mean.items() if k.startswith("rewards/")},
        "epoch": epoch,
    }
    return {**logs, **{k: v for k, v in mean.items() if k not in logs}}


def reward_stats(batch: Any, names: Sequence[str]) -> dict[str, float]:
    """TRL's per-function reward statistics of one step's batch: ``rewards/<fn>/mean`` and
    ``rewards/<fn>/std`` over the samples each function scored (NaN where it returned None)."""
    components = getattr(batch, "reward_components", None)
    if components is None:
        return {}
    out = {}
    for j, name in enumerate(names):
        values = components[:, j].float()
        values = values[~values.isnan()]
        if len(values):
            out[f"rewards/{name}/mean"] = float(values.mean())
            out[f"rewards/{name}/std"] = float(values.std()) if len(values) > 1 else 0.0
    return out


class CallbackRunner:
    """Calls each callback's ``on_*`` hooks as transformers' ``Trainer`` does, with a
    ``TrainerState`` (``global_step``, ``max_steps``, ``log_history``, ...) and a
    ``TrainerControl`` whose ``should_training_stop`` the loop honours."""

    def __init__(self, callbacks: Sequence[Any] | None, args: Any, max_steps: int, logging_steps: int,
                 save_steps: int, objects: dict[str, Any]):
        from transformers import TrainerControl, TrainerState

        self.callbacks = [cb() if isinstance(cb, type) else cb for cb in callbacks or ()]
        self.args, self.objects = args, objects
        self.state = TrainerState(max_steps=max_steps, logging_steps=logging_steps, save_steps=save_steps)
        self.control = TrainerControl()

    def add(self, callback: Any) -> None:
        self.callbacks.append(callback() if isinstance(callback, type) else callback)

    def call(self, event: str, **kwargs: Any) -> None:
        for cb in self.callbacks:
            hook = getattr(cb, event, None)
            if hook is not None:
                result = hook(self.args, self.state, self.control, **self.objects, **kwargs)
                if result is not None:  # transformers lets a callback return a new control
                    self.control = result
