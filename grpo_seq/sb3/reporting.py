"""The Stable-Baselines3 class's logger: what SB3 callbacks record to, and the table each update
dumps into it (the keys SB3's PPO logs, from the update's metrics)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .logger import Logger, tensorboard_run_dir

__all__ = ["Reporting"]


class Reporting:
    """``logger``, ``set_logger`` and each update's ``rollout/``, ``time/`` and ``train/`` rows, for
    :class:`grpo_seq.sb3.model.GRPO` (its ``verbose``, ``tensorboard_log``, episode buffers, counters)."""

    _logger: Any
    _custom_logger: bool

    @property
    def logger(self) -> Any:
        """What SB3 callbacks record to: SB3's own ``Logger`` (where Stable-Baselines3 is
        installed: its ``output_formats``, ``dir``) as SB3 configures it in ``learn``, else
        :class:`grpo_seq.sb3.logger.Logger`."""
        return self._logger

    def set_logger(self, logger: Any) -> None:
        """Use ``logger`` from now on; ``learn`` no longer configures one (as SB3's ``set_logger``)."""
        self._logger, self._custom_logger = logger, True

    def _configure_logger(self, tb_log_name: str, reset_num_timesteps: bool) -> None:
        if self._custom_logger:
            return
        try:
            from stable_baselines3.common.utils import configure_logger
        except ImportError:
            self._logger = Logger(self.verbose)
            if self.tensorboard_log:
                self._logger.open_tensorboard(tensorboard_run_dir(self.tensorboard_log, tb_log_name,
                                                                  reset_num_timesteps))
            return
        self._logger = configure_logger(self.verbose, self.tensorboard_log, tb_log_name, reset_num_timesteps)

    def _dump_logs(self, m: dict[str, float], iteration: int, start: int, t0: float) -> None:
        elapsed = max(time.perf_counter() - t0, 1e-9)
        rec = self.logger.record
        if self.ep_info_buffer:
            rec("rollout/ep_rew_mean", float(np.mean([e["r"] for e in self.ep_info_buffer])))
            rec("rollout/ep_len_mean", float(np.mean([e["l"] for e in self.ep_info_buffer])))
        if self.ep_success_buffer:
            rec("rollout/success_rate", float(np.mean(self.ep_success_buffer)))
        if self.reward_function is not None or self.group_mode == "alternatives":
            rec("rollout/train_reward_mean", m["reward/mean"])
        rec("time/iterations", iteration)
        rec("time/fps", int((self.num_timesteps - start) / elapsed))
        rec("time/time_elapsed", int(elapsed))
        rec("time/total_timesteps", self.num_timesteps)
        for ours, theirs in (("loss/policy", "loss"), ("policy/entropy", "entropy"), ("policy/clip_fraction",
                             "clip_fraction"), ("perf/lr", "learning_rate"), ("loss/grad_norm", "grad_norm"),
                             ("reward/zero_std_groups", "zero_std_groups"), ("policy/approx_kl", "approx_kl")):
            if ours in m and m[ours] == m[ours]:  # NaN: no token was scored for it this update (nothing to show)
                rec(f"train/{theirs}", float(m[ours]))
        rec("train/n_updates", self._trainer.step_count * self.config.mu)  # passes over a rollout, as PPO counts
        self.logger.dump(self.num_timesteps)
