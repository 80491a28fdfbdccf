"""TextArena's single-player games as text environments (extra textarena), played offline."""

from __future__ import annotations

import importlib.util

import pytest
from scripted_policy import ScriptedPolicy
from tiny_lm import make_tokenizer

from grpo_seq.envs.text import TextEnvGroupSampler, make_text_env
from grpo_seq.errors import UsageError

# the package is imported by the tests that play it, not at collection (seconds, on every worker)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("textarena") is None, reason="could not import 'textarena'")


def test_guess_the_number_plays_by_its_id():
    env = make_text_env("textarena:GuessTheNumber-v0")
    prompt, _ = env.reset(seed=3)
    assert "Guess The Number" in prompt and "between 1 and 20" in prompt
    # seed 3's number is 8 (found by playing): higher than 5, lower than 10
    # only what the game added since the last observation, without the echo of the move ("[Player] [10]")
    obs, reward, terminated, _, _ = env.step("[10]")
    assert (obs, reward, terminated) == ("[GAME] The target number is lower.", 0.0, False)
    obs, _, _, _, _ = env.step("[5]")
    assert obs == "[GAME] The target number is higher."
    obs, reward, terminated, _, info = env.step("[8]")
    assert (obs, reward, terminated, info["success"]) == ("", 1.0, True, True)
    # the next episode starts afresh (TextArena's wrappers would carry the last one's messages)
    assert env.reset(seed=3)[0] == prompt


def test_a_group_shares_the_games_number():
    s = TextEnvGroupSampler(make_tokenizer(), "textarena:GuessTheNumber-v0", 2, 2, max_turns=1, max_reply_tokens=8,
                            max_total_tokens=2000)
    batch = s.sample(ScriptedPolicy(s.tokenizer, [["[8]$", "[8]$", "[8]$", "[8]$"]]))
    numbers = [env.game.env.env.game_number for env in s.envs]  # under TextArena's two default wrappers
    assert numbers[0] == numbers[1] and numbers[2] == numbers[3]
    assert batch.rewards.tolist() == [1.0 if n == 8 else 0.0 for n in numbers]


@pytest.mark.parametrize("game, message", [
    ("NoSuchGame-v0", "textarena:NoSuchGame-v0: TextArena cannot make it"),
    ("TicTacToe-v0", "textarena:TicTacToe-v0 is not a single-player game"),
])
def test_what_cannot_be_played_is_named(game, message):
    with pytest.raises(UsageError, match=message):
        make_text_env(f"textarena:{game}").reset(seed=0)
