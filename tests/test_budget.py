"""GRPO_SEQ_QUICK: a smoke test's budget for every kind of job, nothing changed without it."""

from __future__ import annotations

import pytest

from grpo_seq.jobs.budget import cap_env_steps, record_frames, shrink
from grpo_seq.jobs.eval_lm import EvalLMConfig
from grpo_seq.jobs import EnvJob, LMJob


def test_without_the_variable_nothing_changes(monkeypatch):
    monkeypatch.delenv("GRPO_SEQ_QUICK", raising=False)
    spec = EnvJob(env_id="Acrobot-v1")
    assert shrink(spec) is None and spec.total_env_steps == 200_000 and cap_env_steps(25_000) == 25_000
    assert record_frames() is None  # a recorded episode plays to its end
    monkeypatch.setenv("GRPO_SEQ_QUICK", "0")
    assert shrink(spec) is None and spec == EnvJob(env_id="Acrobot-v1")


def test_each_kind_of_job_is_capped(monkeypatch):
    monkeypatch.setenv("GRPO_SEQ_QUICK", "1")
    env = EnvJob(env_id="Acrobot-v1", eval_episodes=10)
    line = shrink(env)
    assert (env.total_env_steps, env.eval_every, env.eval_episodes) == (2_000, 1_000, 2)
    assert "GRPO_SEQ_QUICK" in line and "total_env_steps <= 2000" in line
    small = EnvJob(total_env_steps=500, eval_every=0)  # already under the cap; 0 (no evaluation) stays 0
    shrink(small)
    assert (small.total_env_steps, small.eval_every) == (500, 0)
    lm = LMJob(max_steps=30, max_completion_length=256, num_generations=8, num_groups=4)
    shrink(lm)
    assert (lm.max_steps, lm.max_completion_length, lm.num_generations, lm.num_groups) == (1, 8, 2, 1)
    assert lm.save_optimizer is False  # a checkpoint's Adam state is twice the weights on disk
    ev = EvalLMConfig(limit=0, max_new_tokens=256)
    shrink(ev, "eval_lm")
    assert (ev.limit, ev.max_new_tokens) == (2, 8)
    assert cap_env_steps(25_000) == 2_000
    assert record_frames() == 50


@pytest.mark.parametrize("value", ["1", "yes"])
def test_the_sb3_class_learns_a_capped_budget(monkeypatch, value):
    from grpo_seq import GRPO

    monkeypatch.setenv("GRPO_SEQ_QUICK", value)
    model = GRPO("MlpPolicy", "CartPole-v1", seed=0).learn(total_timesteps=25_000)
    assert 2_000 <= model.num_timesteps < 2_600  # the last update's episodes end past the cap
