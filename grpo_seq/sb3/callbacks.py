"""SB3 callbacks driven from the GRPO loop.

SB3 calls ``callback.on_step()`` once per ``VecEnv.step`` (``n_envs`` timesteps) while it collects a
rollout. Here a rollout is collected inside the sampler in one go, so after each update the
loop makes the same number of ``on_step`` calls it would have made, ``num_timesteps`` advancing
by ``n_envs`` each; they see the updated weights. Counting callbacks (``EvalCallback``'s
``eval_freq``, ``CheckpointCallback``'s ``save_freq``) therefore fire at the timesteps they name.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["as_callback", "FunctionCallback"]


class FunctionCallback:
    """A plain ``callback(locals, globals) -> bool`` as a callback object; ``False`` stops training.
    (SB3 also stops on ``None``; here ``None`` carries on, so a function that returns nothing
    does not end the run after one step.)"""

    def __init__(self, fn: Callable[[dict, dict], Any]):
        self.fn, self.locals, self.globals = fn, {}, {}

    def init_callback(self, model: Any) -> None:
        self.model = model

    def on_training_start(self, locals_: dict, globals_: dict) -> None:
        self.locals, self.globals = locals_, globals_

    def on_rollout_start(self) -> None: ...

    def on_step(self) -> bool:
        return self.fn(self.locals, self.globals) is not False

    def on_rollout_end(self) -> None: ...

    def on_training_end(self) -> None: ...

    def update_locals(self, locals_: dict) -> None:
        self.locals.update(locals_)


class _NoCallback(FunctionCallback):
    def __init__(self) -> None:
        super().__init__(lambda _l, _g: True)


def as_callback(callback: Any) -> Any:
    """None, a callback object (SB3's ``BaseCallback`` protocol), a list of them, or a callable."""
    if callback is None:
        return _NoCallback()
    if isinstance(callback, list):
        from stable_baselines3.common.callbacks import CallbackList  # a list of SB3 callbacks: SB3 is installed

        return CallbackList(callback)
    if hasattr(callback, "on_step") and hasattr(callback, "init_callback"):
        return callback
    if callable(callback):
        return FunctionCallback(callback)
    raise TypeError(f"callback must be an SB3 callback, a list of them or a function, got {type(callback).__name__}")
