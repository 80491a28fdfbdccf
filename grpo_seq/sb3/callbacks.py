"""SB3 callbacks driven from the GRPO loop.

SB3 calls ``callback.on_step()`` once per ``VecEnv.step`` (``n_envs`` timesteps) while it collects a
rollout. Here a rollout is collected inside the sampler in one go, so after each update the
loop makes the same number of ``on_step`` calls it would have made, ``num_timesteps`` advancing
by ``n_envs`` each; they see the updated weights. Counting callbacks (``EvalCallback``'s
``eval_freq``, ``CheckpointCallback``'s ``save_freq``) therefore fire at the timesteps they name.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

__all__ = ["as_callback", "FunctionCallback", "rollout_locals", "Replaying"]


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


def rollout_locals(context: np.ndarray, mask: np.ndarray, rewards: np.ndarray, tokens: np.ndarray, n_envs: int,
                   codec: Any, returns: list[float], cut: list[bool]) -> Iterator[dict[str, Any]]:
    """The locals SB3's ``collect_rollouts`` hands its callbacks at each ``VecEnv.step``
    (``new_obs``, ``rewards``, ``dones``, ``infos``, ``actions``), for a rollout of episodes.

    The episodes' steps, one after another, are dealt out ``n_envs`` at a time: call ``c`` sees steps
    ``c * n_envs ... (c + 1) * n_envs - 1``. As from a VecEnv, a step's ``new_obs`` is the next step's
    observation (the next episode's first at an episode's end), and the step ending an episode
    carries ``infos[i]["episode"] = {"r": return, "l": length}`` (as SB3's ``Monitor`` writes it).
    ``context`` ``(B, T, obs_dim)``, ``mask``, ``rewards``, ``tokens`` ``(B, T)``; ``returns`` the env's
    own episode returns; ``cut[i]``: episode ``i`` was cut short by ``learn``'s budget, not ended
    (no ``done``, as SB3 would carry it on into the next rollout).
    """
    lengths = mask.sum(1)
    obs, rew, act = context[mask], rewards[mask], tokens[mask]
    ends = np.cumsum(lengths) - 1
    done = np.zeros(len(obs), dtype=bool)
    ended = (lengths > 0) & ~np.asarray(cut, dtype=bool)
    done[ends[ended]] = True
    info_at = {int(e): {"episode": {"r": float(r), "l": int(n)}}
               for e, r, n, x in zip(ends, returns, lengths, ended) if x}
    new_obs = np.concatenate([obs[1:], obs[-1:]]) if len(obs) else obs
    native_act = codec.decode_actions(act)
    for c in range(len(obs) // n_envs):
        s = slice(c * n_envs, (c + 1) * n_envs)
        yield {"new_obs": codec.decode_obs(new_obs[s]), "rewards": rew[s], "dones": done[s], "actions": native_act[s],
               "infos": [dict(info_at.get(i, {})) for i in range(s.start, s.stop)]}


class Replaying:
    """The ``on_step`` calls SB3 would have made during the rollout an update just trained on, for
    :class:`grpo_seq.sb3.model.GRPO` (its ``num_timesteps``, ``_source``, ``group_mode``, run)."""

    num_timesteps: int
    n_envs: int
    group_mode: str
    _source: Any
    _trainer: Any

    def _replay_steps(self, cb: Any, new: int) -> bool:
        """SB3's ``on_step`` calls for ``new`` env steps, each after ``update_locals`` with the
        locals SB3's callbacks read (:func:`grpo_seq.sb3.callbacks.rollout_locals`); False stops."""
        n_envs, end = self._source.n_envs, self.num_timesteps + new
        steps = self._rollout_locals(new)
        go_on = True
        while go_on and self.num_timesteps + n_envs <= end:
            self.num_timesteps += n_envs
            loc = next(steps, None) if steps is not None else None
            if loc is not None:
                cb.update_locals(loc)
            go_on = bool(cb.on_step())
        return go_on

    def _rollout_locals(self, new: int) -> Any:
        sampler = self._trainer.sampler
        batch = sampler.last_batch
        if batch is None or self.group_mode != "episodes" or int(batch.mask.sum()) != new:
            return None
        mask = batch.mask.numpy().copy()
        cut = sampler.last_episode_cut
        returns = [float("nan") if c else r for r, c in zip(sampler.last_episode_returns, cut)]
        return rollout_locals(batch.context.numpy(), mask, batch.step_rewards.numpy(), batch.tokens.numpy(),
                              self.n_envs, self._source.codec, returns, cut)
