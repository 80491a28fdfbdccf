"""A greedy episode of an action policy on video: a GIF (and an MP4 when ffmpeg is installed).

    grpo-seq record --policy runs/<run>/policy --out agent.gif   # a saved policy
    python recipes/cartpole.py --record                                     # at the end of training

Frames come from the environment's ``rgb_array`` renderer (CartPole's needs pygame:
``pip install pygame``, or the ``record`` extra), one per step, each showing the state the
policy acted in with the step number and the return so far drawn on it; so the GIF has as
many frames as the episode has steps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..errors import UsageError
from ..policies.actor import make_actor

__all__ = ["record_episode", "check_renderer"]


def _actor(policy: nn.Module):
    act = make_actor(policy, greedy=True)
    return lambda obs: int(act(np.asarray(obs, dtype=np.float32)[None])[0])


def check_renderer(env_id: str) -> None:
    """Raise :class:`UsageError` saying what to install when ``env_id`` cannot render frames."""
    import gymnasium as gym

    from ..sampling.env import make_env

    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        env = make_env(env_id, render_mode="rgb_array")
        env.reset(seed=0)
        env.render()
        env.close()
    except gym.error.DependencyNotInstalled as e:
        raise UsageError(f"--record: {env_id} cannot render frames: {e}") from None


@torch.no_grad()
def record_episode(policy: nn.Module, env_id: str, out: str | Path, seed: int = 0, fps: int = 50, scale: float = 0.5,
                   max_steps: int | None = None, mp4: bool = True) -> dict:
    """Play one greedy episode of ``policy`` on ``env_id`` and write it to ``out`` (a .gif).

    Returns ``{"gif", "mp4" (None without ffmpeg), "frames", "return", "seed"}``; ``frames`` is
    the episode length.
    """
    from PIL import Image, ImageDraw, ImageFont

    from ..sampling.env import make_env

    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame renders off-screen, no display needed
    nvec = getattr(policy, "action_nvec", None)  # a continuous action: the values each dimension was cut into
    env = make_env(env_id, render_mode="rgb_array", action_bins=int(nvec[0]) if nvec else None)
    act = _actor(policy)
    font = ImageFont.load_default(size=max(10, int(28 * scale)))
    obs, _ = env.reset(seed=seed)
    frames: list[Image.Image] = []
    total, done, t = 0.0, False, 0
    limit = max_steps or (env.spec.max_episode_steps if env.spec and env.spec.max_episode_steps else 10_000)
    while not done and t < limit:
        image = Image.fromarray(env.render())
        if scale != 1.0:
            image = image.resize((max(2, int(image.width * scale) // 2 * 2), max(2, int(image.height * scale) // 2 * 2)))
        ImageDraw.Draw(image).text((6, 4), f"step {t + 1}   return {total:.0f}", fill=(20, 20, 20), font=font)
        frames.append(image)
        obs, reward, terminated, truncated, _ = env.step(act(obs))
        total += float(reward)
        done = terminated or truncated
        t += 1
    env.close()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    frames[0].save(out, save_all=True, append_images=frames[1:], duration=max(1, round(1000 / fps)), loop=0)
    video = None
    if mp4 and shutil.which("ffmpeg"):
        video = out.with_suffix(".mp4")
        w, h = frames[0].size
        cmd = ["ffmpeg", "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}",
               "-r", str(fps), "-i", "-", "-pix_fmt", "yuv420p", str(video)]
        subprocess.run(cmd, input=b"".join(f.convert("RGB").tobytes() for f in frames), check=True)
    return {"gif": str(out), "mp4": str(video) if video else None, "frames": len(frames), "return": total, "seed": seed}
