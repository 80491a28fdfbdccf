"""CarRacing-v3 (Box2D) as rl-zoo3 trains it with PPO, the image a policy's torso reads.

``car_racing_wrapper`` is CarRacing's ``env_wrappers`` default (:mod:`grpo_seq.envs.defaults`),
the one wrapper the command line, spec files, evaluation and a saved policy's acting all put
around the env, with rl-zoo3's ``env_wrapper`` and ``frame_stack`` for it:

- each action held for 2 frames, their rewards summed (rl-zoo3's ``FrameSkip``);
- frames resized from 96 x 96 to 64 x 64 and made grey;
- the last 2 frames as the channels of one image, ``(2, 64, 64)`` uint8, channels first: the
  policy's torso is the Nature CNN (:class:`grpo_seq.policies.image_torso.ImageTorso`).

The track is drawn from the reset's seed, so a group's members, reset with one seed, drive the
same track. Needs the ``control`` extra (Box2D, rl-zoo3, OpenCV for the resizing).
"""

from __future__ import annotations

from typing import Any

from ..errors import UsageError

__all__ = ["FRAMES", "SIZE", "SKIP", "car_racing_wrapper"]

SKIP, SIZE, FRAMES = 2, (64, 64), 2  # rl-zoo3's CarRacing-v3 entry for PPO


def car_racing_wrapper(env: Any) -> Any:
    """``env`` (a ``CarRacing-v3`` env) as rl-zoo3 preprocesses it: observations ``(2, 64, 64)`` uint8."""
    import gymnasium as gym

    try:
        import cv2  # noqa: F401  (gymnasium's ResizeObservation resizes with it)
        from rl_zoo3.wrappers import FrameSkip
    except ImportError as e:
        raise UsageError(f"CarRacing's wrapper needs rl-zoo3 and OpenCV ({e}): pip install -e \".[control]\"") from None
    frames = gym.wrappers.ResizeObservation(FrameSkip(env, SKIP), SIZE)
    grey = gym.wrappers.GrayscaleObservation(frames, keep_dim=False)
    return gym.wrappers.FrameStackObservation(grey, FRAMES)
