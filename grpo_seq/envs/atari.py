"""Atari (ale-py's ``ALE/...-v5``) as Stable-Baselines3 trains it: SB3's ``AtariWrapper``, then the
last four frames stacked as the image's channels.

``atari_wrapper`` is the Atari family's ``env_wrappers`` default (:mod:`grpo_seq.envs.defaults`),
the one wrapper the command line, spec files, evaluation and a saved policy's acting all put
around the env:

- SB3's ``AtariWrapper`` (no-op starts, fire on reset, 84 x 84 grey frames, rewards clipped to
  their sign), with ``frame_skip=1``: a v5 env already repeats each action for 4 frames and makes
  it sticky with probability 0.25 (``repeat_action_probability``), as the env defines it; and
  ``terminal_on_life_loss=False``: an episode is a whole game, so a group's members, which start
  from one state, are compared game against game, not life against life.
- The last 4 frames as the channels of one image, ``(4, 84, 84)``, channels first (what
  SB3's ``VecFrameStack`` over ``VecTransposeImage`` hands its ``CnnPolicy``): the policy's
  torso is the Nature CNN (:class:`grpo_seq.policies.image_torso.ImageTorso`).

Needs the ``atari`` extra (ale-py, Stable-Baselines3, OpenCV for the frames' resizing).
"""

from __future__ import annotations

from typing import Any

from ..errors import UsageError

__all__ = ["FRAMES", "atari_wrapper"]

FRAMES = 4  # frames stacked, as SB3's and rl-zoo3's Atari settings stack them


def atari_wrapper(env: Any) -> Any:
    """``env`` (an ``ALE/...-v5`` env) as SB3 preprocesses Atari, its last :data:`FRAMES` frames
    stacked channels first: observations ``(4, 84, 84)`` uint8."""
    import gymnasium as gym

    try:
        from stable_baselines3.common.atari_wrappers import AtariWrapper
    except ImportError as e:
        raise UsageError(f"the Atari wrapper needs Stable-Baselines3 and OpenCV ({e}): pip install -e \".[atari]\"") from None
    try:
        wrapped = AtariWrapper(env, frame_skip=1, terminal_on_life_loss=False)
    except ImportError as e:  # SB3 imports OpenCV only when its WarpFrame is built
        raise UsageError(f"the Atari wrapper needs OpenCV ({e}): pip install -e \".[atari]\"") from None
    height, width = wrapped.observation_space.shape[:2]
    frame = gym.wrappers.ReshapeObservation(wrapped, (height, width))
    return gym.wrappers.FrameStackObservation(frame, FRAMES)
