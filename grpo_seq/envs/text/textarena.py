"""A single-player TextArena game (``textarena`` on PyPI, extra ``textarena``) as a text environment.

    make_text_env("textarena:GuessTheNumber-v0")      # what --env_id textarena:GuessTheNumber-v0 makes

TextArena's own loop is ``reset(num_players=1, seed=)``, ``get_observation() -> (player, text)``,
``step(action) -> (done, info)`` and ``close() -> (rewards, game_info)``. Here:

- the prompt is the game's first observation;
- each observation is what the game added since the last one, without the echo of the player's
  own move (its default wrappers repeat the whole history in every observation; the chat
  already holds it), and a raw variant's message list (``-raw`` ids) is joined, without the
  player's own moves;
- each reset makes the game afresh (``ta.make``): its wrappers keep every message they have seen;
- the reward is 0 until the game ends, then the player's reward from ``close()``, with
  ``info["success"]`` true when it is 1 or more (a single-player win pays 1);
- the game is made with TextArena's default wrappers for that id, as ``ta.make`` makes it.

TextArena seeds Python's global ``random`` at every reset (its games draw from it), so the
members of a group start from the same state; games that draw during play share that stream.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from ...errors import UsageError

__all__ = ["TextArenaEnv"]

_MAX_TEXT = 1_000_000
_GAME = "GAME"  # how TextArena's string observations name the game's own messages: "[GAME] ..."


class TextArenaEnv(gym.Env):
    """``textarena.make(game_id, **kwargs)`` behind the text-environment contract."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, game_id: str, **kwargs: Any):
        try:
            import textarena as ta
        except ImportError:
            raise UsageError(f"textarena:{game_id} needs TextArena: pip install -e \".[textarena]\" "
                             "(or pip install textarena)") from None
        self.game_id, self._make = game_id, lambda: ta.make(game_id, **kwargs)
        try:
            self.game = self._make()
        except (ValueError, ImportError, TypeError) as e:
            raise UsageError(f"textarena:{game_id}: TextArena cannot make it ({e}); ids are listed by "
                             "textarena.envs.registration.ENV_REGISTRY") from None
        self.observation_space = gym.spaces.Text(max_length=_MAX_TEXT)
        self.action_space = gym.spaces.Text(max_length=_MAX_TEXT)
        self._seen = ""

    def _observation(self) -> str:
        """What the game says now that it did not say before."""
        player, obs = self.game.get_observation()
        if not isinstance(obs, str):  # a raw game: (from, message, kind) since the last observation
            return "\n".join(str(m[1]) for m in obs if m[0] != player).strip()
        new = (obs[len(self._seen):] if obs.startswith(self._seen) else obs).strip()
        self._seen = obs
        game = new.find(f"[{_GAME}]")
        if new.startswith("[") and not new.startswith(f"[{_GAME}]") and game > 0:
            new = new[game:]  # the wrapper's echo of the player's own move comes first: the chat holds it
        return new

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        # a fresh game each episode: TextArena's observation wrappers keep every message since they were made
        self.game, self._seen = self._make(), ""
        try:
            self.game.reset(num_players=1, seed=seed)
        except AssertionError as e:  # TextArena's states assert their number of players
            raise UsageError(f"textarena:{self.game_id} is not a single-player game ({e}); a text environment "
                             "here is played by one model") from None
        return self._observation(), {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        done, info = self.game.step(action)
        if not done:
            return self._observation(), 0.0, False, False, dict(info or {})
        rewards, game_info = self.game.close()
        reward = float((rewards or {}).get(0, 0.0))
        player = (game_info or {}).get(0, {})
        return "", reward, True, False, {**player, "success": reward >= 1}
