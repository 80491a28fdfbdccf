"""transformers ``TrainerCallback``s called from grpo-seq's loop, with TRL's state and log names."""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["CallbackRunner", "trl_logs"]


def trl_logs(window: Sequence[dict], scorer_names: Sequence[str], epoch: float) -> dict[str, float]:
    """The mean of a logging window's metrics under TRL's names (``reward``, ``reward_std``,
    ``rewards/<fn>/mean``, ``kl``, ``loss``, ``learning_rate``, ``completions/mean_length``,
    ``epoch``) and grpo-seq's own."""
    keys = [k for k in window[-1] if k != "step" and isinstance(window[-1][k], (int, float))]
    mean = {k: sum(m.get(k, 0.0) for m in window) / len(window) for k in keys}
    logs = {
        "loss": mean.get("loss/policy", 0.0), "grad_norm": mean.get("loss/grad_norm", 0.0),
        "learning_rate": mean.get("perf/lr", 0.0), "reward": mean["reward/mean"], "reward_std": mean["reward/std"],
        "kl": mean.get("policy/kl", 0.0), "completions/mean_length": mean["policy/completion_length"],
        "frac_reward_zero_std": mean["reward/zero_std_groups"],
        **{f"rewards/{n}/mean": mean[f"reward/{n}"] for n in scorer_names if f"reward/{n}" in mean},
        "epoch": epoch,
    }
    return {**logs, **{k: v for k, v in mean.items() if k not in logs}}


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
