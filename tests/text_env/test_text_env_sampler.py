"""The text-environment sampler: masks token by token, log-probs, per-turn advantages, limits and
misbehaving environments (grpo_seq/envs/text/sampler.py)."""

from __future__ import annotations

import pytest
import torch
from guess_env import Scripted
from scripted_policy import ScriptedPolicy
from tiny_lm import make_tiny_lm, make_tokenizer

from grpo_seq import LoopConfig
from grpo_seq.math.advantages import compute_advantages, steps_of_tokens
from grpo_seq.envs.text import HELD_OUT_SEED, TextEnvGroupSampler, evaluate_text_env
from grpo_seq.errors import UsageError
from grpo_seq.policies import CausalLMPolicy


def sampler(env_id="guess_env:Scripted-v0", num_groups=1, num_generations=2, **kw):
    kw = {"max_turns": 4, "max_reply_tokens": 8, "max_total_tokens": 200, **kw}
    return TextEnvGroupSampler(make_tokenizer(), env_id, num_groups, num_generations, **kw)


def test_masks_token_by_token_on_a_two_turn_conversation():
    s = sampler()  # Scripted: ends after two turns, answers "ok"
    tok = s.tokenizer
    # member 0: "ab" then EOS (the pad after it is post-EOS); member 1: "xyz" with no EOS, then "c" and EOS
    policy = ScriptedPolicy(tok, [["ab$", "xyz"], ["c$", "de$"]])
    batch = s.sample(policy)
    eos, glue = tok.eos_token_id, "<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n"
    ids = policy.ids
    # member 0: reply "ab$", the template's "\n" after its EOS, the env's turn, reply "c$"
    row0 = ids("ab") + [eos] + tok("\n" + glue, add_special_tokens=False)["input_ids"] + ids("c") + [eos]
    # member 1: a reply cut at 3 tokens has no EOS: the template closes its turn (<|im_end|>\n, not trained)
    row1 = ids("xyz") + tok("<|im_end|>\n" + glue, add_special_tokens=False)["input_ids"] + ids("de") + [eos]
    n0, n1 = len(row0), len(row1)
    assert n1 == n0 + 2  # one more reply token, and the close's <|im_end|>
    assert batch.tokens[0, :n0].tolist() == row0 and batch.tokens[1].tolist() == row1
    g0 = n0 - 3 - 2  # the glue's tokens in row 0: all but 3 + 2 reply tokens
    want0 = [1] * 3 + [0] * g0 + [1] * 2 + [0] * (n1 - n0)  # padding after member 0's last EOS: 0
    want1 = [1] * 3 + [0] * (g0 + 1) + [1] * 3
    assert batch.mask.int().tolist() == [want0, want1]
    # each reply token knows its turn; env, template and padding tokens are -1
    assert batch.step_index[0].tolist() == [0] * 3 + [-1] * g0 + [1] * 2 + [-1] * 2
    assert batch.lengths().tolist() == [5, 6]  # reply tokens only
    assert batch.text.completion_ids[0] == ids("ab") + [eos] + ids("c") + [eos]


def test_the_instruction_follows_the_prompt_and_every_observation_and_is_never_trained():
    s = sampler(instruction="Reply [n].")
    tok = s.tokenizer
    policy = ScriptedPolicy(tok, [["ab$", "xy$"], ["c$", "d$"]])
    batch = s.sample(policy)
    assert s.format.prompt_text(batch.text.prompts[0]).endswith("\nReply [n].<|im_end|>\n<|im_start|>assistant\n")
    eos, ids = tok.eos_token_id, policy.ids
    glue = "\n<|im_start|>user\nok\nReply [n].<|im_end|>\n<|im_start|>assistant\n"  # the env's "ok", then the reminder
    row0 = ids("ab") + [eos] + tok(glue, add_special_tokens=False)["input_ids"] + ids("c") + [eos]
    assert batch.tokens[0, :len(row0)].tolist() == row0
    g = len(row0) - 5
    assert batch.mask[0, :len(row0)].int().tolist() == [1] * 3 + [0] * g + [1] * 2


def test_rewards_sit_on_each_turns_last_reply_token():
    s = sampler(env_kwargs={"rewards": (0.5, 2.0)})
    batch = s.sample(ScriptedPolicy(s.tokenizer, [["ab$", "x$"], ["c$", "d$"]]))
    r = batch.step_rewards[0]
    assert r.nonzero().flatten().tolist() == [2, int(batch.mask[0].nonzero()[-1])]
    assert r[r != 0].tolist() == [0.5, 2.0]
    assert batch.rewards.tolist() == [2.5, 2.5]  # the episode's total: the outcome reward


def count_a_batch():
    """Three members of one group in CountA (reward = count of 'a'; '!' ends the episode):
    A pays (1, 0), B says '!' and ends at turn 1 with 0, C pays (1, 1)."""
    s = sampler("guess_env:CountA-v0", num_generations=3)
    return s.sample(ScriptedPolicy(s.tokenizer, [["a$", "!$", "a$"], ["b$", "a$"]]))


@pytest.mark.parametrize("mode, turn1, turn2", [
    # outcome: totals (1, 0, 2), mean 1, std 1 -> (0, -1, 1) on every reply token
    ("outcome", [0.0, -1.0, 1.0], [0.0, None, 1.0]),
    # stepwise, turn 1: returns-to-go (1, 0, 2) -> (0, -1, 1); turn 2: only A and C still play,
    # returns-to-go (0, 1), mean 0.5, std sqrt(0.5) -> (-0.7071, +0.7071)
    ("stepwise", [0.0, -1.0, 1.0], [-0.70711, None, 0.70711]),
    # process: the group's turn rewards (1, 0 | 0 | 1, 1), mean 0.6, std sqrt(0.3) = 0.5477:
    # 1 -> 0.7303, 0 -> -1.0954; a turn's advantage sums its own and its later turns' values:
    # A (0.7303 - 1.0954, -1.0954), B (-1.0954), C (0.7303 + 0.7303, 0.7303)
    ("process", [-0.36515, -1.09545, 1.46059], [-1.09545, None, 0.73030]),
])
def test_per_turn_advantages_by_hand(mode, turn1, turn2):
    batch = count_a_batch()
    adv = compute_advantages(batch, LoopConfig(advantage=mode, num_generations=3, num_groups=1))
    for i in range(3):
        for turn, want in ((0, turn1[i]), (1, turn2[i])):
            tokens = batch.mask[i] & (batch.step_index[i] == turn)
            if want is None:
                assert not tokens.any()
                continue
            assert tokens.sum() == 2  # a letter and the EOS, both with their turn's advantage
            assert adv[i][tokens].tolist() == pytest.approx([want, want], abs=1e-4)
    assert (adv[~batch.mask] == 0).all()


def test_log_probs_of_a_multi_turn_sample_equal_the_sampling_log_probs():
    torch.manual_seed(0)
    model, tok = make_tiny_lm()
    policy = CausalLMPolicy(model, tok)
    s = TextEnvGroupSampler(tok, "guess_env:GuessDigit-v0", 2, 3, max_turns=3, max_reply_tokens=4,
                            max_total_tokens=80, sampler_logprobs=True)
    batch = s.sample(policy)
    assert (batch.step_index.amax(-1) >= 1).all()  # every episode played two turns or more
    logp, _ = policy(batch)
    assert (batch.sampler_logp[batch.mask] < 0).all()
    torch.testing.assert_close(logp[batch.mask], batch.sampler_logp[batch.mask], atol=1e-4, rtol=0)
    assert (logp[~batch.mask] == 0).all()  # the environment's tokens are never scored


def test_a_group_shares_its_start_state_and_groups_differ():
    s = sampler("guess_env:GuessDigit-v0", num_groups=3, num_generations=2, env_kwargs={"low": 0, "high": 9999})
    s.sample(ScriptedPolicy(s.tokenizer, [["a$"] * 6] * 4))
    secrets = [env.unwrapped.secret for env in s.envs]
    assert secrets[0::2] == secrets[1::2] and len(set(secrets)) == 3


def test_max_turns_ends_episodes_as_truncated():
    s = sampler(max_turns=1)  # Scripted needs two turns to end
    batch = s.sample(ScriptedPolicy(s.tokenizer, [["a$", "b$"]]))
    assert batch.truncated.tolist() == [True, True]
    assert batch.metrics["text_env/turns"] == 1.0 and batch.metrics["policy/truncated_fraction"] == 1.0


def test_max_reply_tokens_cuts_a_reply_and_counts_it():
    s = sampler(max_reply_tokens=2)
    batch = s.sample(ScriptedPolicy(s.tokenizer, [["abcd$", "a$"], ["b$", "c$"]]))
    assert batch.text.completions[0][0]["content"] == "ab"  # the cut reply still goes to the env
    assert batch.truncated.tolist() == [False, False]  # the episode itself ended on its own
    assert batch.metrics["text_env/cut_reply_fraction"] == pytest.approx(1 / 4)


def test_max_total_tokens_truncates_the_conversation():
    s = sampler(max_total_tokens=40)
    prompt = len(s.format.prompt_ids("go"))  # the chat-rendered prompt "go"
    batch = s.sample(ScriptedPolicy(s.tokenizer, [["abc$", "d$"], ["e$", "f$"]]))
    assert batch.truncated.tolist() == [True, True]  # the env's answer and a reply no longer fit
    assert (prompt + batch.tokens.shape[1]) <= 40 and batch.metrics["text_env/turns"] == 1.0


@pytest.mark.parametrize("bad, message", [
    ("raise", "guess_env:Scripted-v0 raised RuntimeError at turn 2"),
    ("nan", "guess_env:Scripted-v0 returned the reward nan at turn 2"),
    ("obs", "guess_env:Scripted-v0 returned an observation of type list ([1, 2]) at turn 2"),
    ("text reward", "guess_env:Scripted-v0 returned the reward '1.0' at turn 2; rewards must be finite numbers"),
    ("no info", "guess_env:Scripted-v0 returned the info None at turn 2; a step's info is a dict"),
    ("messages", "guess_env:Scripted-v0 returned info['messages'] = 'the tool said 3' at turn 2; give a list"),
])
def test_a_misbehaving_env_is_named_with_its_turn(bad, message):
    s = sampler(env_kwargs={"rewards": (0, 0, 0), "bad_turn": 2, "bad": bad})
    with pytest.raises(UsageError) as e:
        s.sample(ScriptedPolicy(s.tokenizer, [["a$", "b$"]] * 3))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_an_env_without_text_spaces_is_refused():
    with pytest.raises(UsageError, match="CartPole-v1: its observation_space is Box.*not gymnasium.spaces.Text"):
        sampler("CartPole-v1")


def test_a_module_that_does_not_import_is_named():
    with pytest.raises(UsageError, match="--env_id no_such_module:Game-v0: No module named 'no_such_module'"):
        sampler("no_such_module:Game-v0")


def test_checkpoint_state_repeats_the_start_states():
    s = sampler("guess_env:GuessDigit-v0", env_kwargs={"low": 0, "high": 9999})
    state = s.state_dict()
    s.sample(ScriptedPolicy(s.tokenizer, [["a$"] * 2] * 4))
    first = [env.unwrapped.secret for env in s.envs]
    s.load_state_dict(state)
    s.sample(ScriptedPolicy(s.tokenizer, [["a$"] * 2] * 4))
    assert [env.unwrapped.secret for env in s.envs] == first
    assert Scripted  # the module registered its envs on import


def test_steps_of_tokens_sums_each_turns_tokens():
    # row 0: turn 0 = tokens 0-1 (reward 2 on its last), an env token, turn 1 = tokens 3-4 (reward 3)
    # row 1: one turn of two tokens (reward 1), then padding
    r_t = torch.tensor([[0.0, 2.0, 0.0, 0.0, 3.0], [0.0, 1.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    step = torch.tensor([[0, 0, -1, 1, 1], [0, 0, -1, -1, -1]])
    r_s, m_s = steps_of_tokens(r_t, mask, step)
    assert r_s.tolist() == [[2.0, 3.0], [1.0, 0.0]] and m_s.tolist() == [[True, True], [True, False]]


def test_a_prompt_longer_than_the_conversation_limit_is_named():
    s = sampler(max_total_tokens=10)  # the chat-rendered prompt "go" alone is longer
    with pytest.raises(UsageError, match="guess_env:Scripted-v0: a prompt of .* tokens leaves no room for a reply "
                                         "under max_total_tokens=10"):
        s.sample(ScriptedPolicy(s.tokenizer, [["a$", "b$"]]))


def test_held_out_evaluation_plays_greedily_from_its_own_seeds():
    s = sampler("guess_env:CountA-v0", num_generations=3)
    policy = ScriptedPolicy(s.tokenizer, [["a$", "!$", "a$"], ["b$", "a$"]])
    figures, records = evaluate_text_env(policy, s, episodes=3)
    # returns (1, 0, 2), turns (2, 1, 2), reply tokens (4, 2, 4); CountA reports no success
    assert figures["return"] == 1.0 and figures["turns"] == pytest.approx(5 / 3)
    assert figures["reply_tokens"] == pytest.approx(10 / 3) and figures["success_rate"] != figures["success_rate"]
    assert [r["seed"] for r in records] == [HELD_OUT_SEED, HELD_OUT_SEED + 1, HELD_OUT_SEED + 2]
    assert records[1]["conversation"] == [{"role": "assistant", "content": "!", "reward": 0.0, "trained": True}]


def test_the_step_time_splits_into_generation_and_the_environments_calls(monkeypatch):
    # a clock that moves only inside the environment (1 a reset or step) and in generate (10 a call):
    # the sampler's timers must wrap exactly those calls for the sums below to come out
    import types

    import grpo_seq.envs.text.sampler as sampler_module

    now = [0.0]
    monkeypatch.setattr(sampler_module, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    class TimedEnv(Scripted):
        def reset(self, seed=None, options=None):
            now[0] += 1.0
            return super().reset(seed=seed, options=options)

        def step(self, reply):
            now[0] += 1.0
            return super().step(reply)

    class TimedPolicy(ScriptedPolicy):
        def generate(self, *args, **kwargs):
            now[0] += 10.0
            return super().generate(*args, **kwargs)

    s = TextEnvGroupSampler(make_tokenizer(), None, 1, 2, max_turns=4, max_reply_tokens=8, env_fn=TimedEnv)
    batch = s.sample(TimedPolicy(s.tokenizer, [["ab$", "xyz$"], ["c$", "de$"]]))  # two turns each
    m = batch.metrics
    assert m["perf/env_seconds"] == 2 * 1.0 + 4 * 1.0  # two resets, four steps
    assert m["perf/generation_seconds"] == 2 * 10.0  # one generate call a turn for both episodes
    assert int(batch.mask.sum()) == 3 + 4 + 2 + 3
    assert m["perf/reply_tokens_per_second"] == 12 / 20.0


def test_anchor_states_compare_the_turns_that_answer_the_same_observation():
    # Echo: four members; turn 1 replies "a", "a", "b", "b" (paying 1, 1, 0, 0), so at turn 2 the
    # first two answer the observation "a" and the last two "b"; turn 2 replies pay 1, 0, 1, 1
    s = sampler("guess_env:TestEcho-v0", num_generations=4)
    batch = s.sample(ScriptedPolicy(s.tokenizer, [["a$", "a$", "b$", "b$"], ["a$", "c$", "a$", "a$"]]))
    anchor = [[int(batch.step_anchor[i][batch.mask[i] & (batch.step_index[i] == t)][0]) for t in (0, 1)]
              for i in range(4)]
    assert len({a[0] for a in anchor}) == 1  # turn 1: every member answers the prompt
    assert anchor[0][1] == anchor[1][1] != anchor[2][1] == anchor[3][1]
    assert (batch.step_anchor[~batch.mask] == -1).all()
    cfg = LoopConfig(advantage="stepwise", scale_rewards=False, gamma=1.0, num_generations=4, num_groups=1,
                     step_advantage_w=1.0)
    # returns-to-go: turn 1 (2, 1, 1, 1), turn 2 (1, 0, 1, 1)
    # anchor part, turn 1: one group (the prompt), mean 1.25 -> (0.75, -0.25, -0.25, -0.25)
    #   turn 2: "a" holds members 0, 1: (1, 0), mean 0.5 -> (0.5, -0.5); "b" holds 2, 3: (1, 1) -> 0, 0
    # step-wise part (centred by step): turn 1 the same (0.75, -0.25, -0.25, -0.25); turn 2 mean 0.75
    #   -> (0.25, -0.75, 0.25, 0.25)
    want = [[1.5, 0.75], [-0.5, -1.25], [-0.5, 0.25], [-0.5, 0.25]]
    adv = compute_advantages(batch, cfg)
    for i in range(4):
        for t in (0, 1):
            tokens = batch.mask[i] & (batch.step_index[i] == t)
            assert adv[i][tokens].tolist() == pytest.approx([want[i][t]] * int(tokens.sum()), abs=1e-5)
