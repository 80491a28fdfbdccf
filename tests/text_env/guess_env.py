"""Scripted text environments for the tests, registered with gymnasium on import, so that
``guess_env:GuessDigit-v0`` names one as a user's own module would.

GuessDigit: guess a secret digit from ``low`` to ``high``; each reply's first digit is the guess,
answered ``higher`` or ``lower``; reward 1 and the end for the right digit, 0 otherwise.
Scripted: rewards fixed per turn (for hand-computed advantages), and envs that misbehave.
"""

from __future__ import annotations

import math
import re

import gymnasium as gym
from gymnasium.spaces import Text


class GuessDigit(gym.Env):
    def __init__(self, low: int = 1, high: int = 4):
        self.low, self.high = low, high
        self.observation_space = self.action_space = Text(max_length=200)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.secret = int(self.np_random.integers(self.low, self.high + 1))
        return f"?{self.low}-{self.high}", {}

    def step(self, reply):
        found = re.search(r"\d", reply)
        if found is None:
            return "x", 0.0, False, False, {"success": False}
        guess = int(found.group())
        if guess == self.secret:
            return "=", 1.0, True, False, {"success": True}
        return ("+" if guess < self.secret else "-"), 0.0, False, False, {"success": False}


class Scripted(gym.Env):
    """Pays ``rewards[k]`` at turn k + 1 and ends after ``len(rewards)`` turns; answers ``obs``."""

    def __init__(self, rewards=(0.0, 1.0), obs="ok", bad_turn=None, bad="raise"):
        self.rewards, self.obs, self.bad_turn, self.bad = list(rewards), obs, bad_turn, bad
        self.observation_space = self.action_space = Text(max_length=200)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.turn = 0
        return "go", {}

    def step(self, reply):
        self.turn += 1
        if self.turn == self.bad_turn:
            if self.bad == "raise":
                raise RuntimeError("the board is on fire")
            if self.bad == "nan":
                return self.obs, math.nan, False, False, {}
            if self.bad == "obs":
                return [1, 2], 0.0, False, False, {}
            if self.bad == "text reward":
                return self.obs, "1.0", False, False, {}
            if self.bad == "no info":
                return self.obs, 0.0, False, False, None
            if self.bad == "messages":
                return self.obs, 0.0, False, False, {"messages": "the tool said 3"}
        reward = self.rewards[self.turn - 1] if self.turn <= len(self.rewards) else 0.0
        return self.obs, reward, self.turn >= len(self.rewards), False, {}


gym.register("GuessDigit-v0", entry_point=GuessDigit)
gym.register("Scripted-v0", entry_point=Scripted)


class CountA(Scripted):
    """Pays the number of ``a`` in each reply; ends at a reply holding ``!`` or after two turns."""

    def step(self, reply):
        self.turn += 1
        return "ok", float(reply.count("a")), "!" in reply or self.turn == 2, False, {}


gym.register("CountA-v0", entry_point=CountA)


class Echo(Scripted):
    """Answers each reply with its first letter (so members that said the same thing see the same
    observation next), pays the number of ``a`` in it, and ends after two turns."""

    def step(self, reply):
        self.turn += 1
        return (reply[:1] or "_"), float(reply.count("a")), self.turn == 2, False, {}


gym.register("TestEcho-v0", entry_point=Echo)  # "Echo-v0" is the text env guide's own example
