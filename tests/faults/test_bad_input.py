"""Bad input, tried on purpose: each gets an error that names the culprit and what to do."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from grpo_seq import CategoricalMLPPolicy, CausalLMPolicy, EnvGroupSampler, LoopConfig, GRPOLoop, LMGroupSampler
from grpo_seq import RewardScorer, RolloutBatch
from grpo_seq.io.prompt_data import chat_prompts
from tiny_lm import make_tiny_lm
import forkrun  # tests/forkrun.py: Python programs forked from a warm process

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flags, message", [
    (["--epsilon", "0"], "LoopConfig.epsilon: must be in (0, 1), got 0.0"),
    (["--beta", "-1"], "LoopConfig.beta: must be >= 0, got -1.0"),
    (["--loss_type", "ppo"], "LoopConfig.loss_type: must be one of ('grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo', 'sapo', 'luspo', 'vespo'), got 'ppo'"),
    (["--num_generations", "1"], "LoopConfig.num_generations: a group needs at least 2 outputs"),
])
def test_a_flag_the_config_refuses_is_one_error_line_not_a_traceback(flags, message):
    res = forkrun.run([sys.executable, str(ROOT / "recipes/cartpole.py"), *flags], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert res.returncode == 2
    assert message in res.stderr and "Traceback" not in res.stderr, res.stderr


class _BrokenEnv(gym.Env):
    """Finite for two steps, then NaN in the observation (``what='obs'``) or the reward."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, what: str = "obs"):
        self.what, self.t = what, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        bad = self.t == 3
        obs = np.full(3, np.nan if bad and self.what == "obs" else 0.1, np.float32)
        return obs, (math.nan if bad and self.what == "reward" else 1.0), False, False, {}


gym.register("BrokenObs-v0", entry_point=_BrokenEnv, kwargs={"what": "obs"}, max_episode_steps=10)
gym.register("BrokenReward-v0", entry_point=_BrokenEnv, kwargs={"what": "reward"}, max_episode_steps=10)


@pytest.mark.parametrize("env_id, message", [
    ("BrokenObs-v0", r"BrokenObs-v0 returned a non-finite observation \(NaN or inf\) at step 3 .* wrap it"),
    ("BrokenReward-v0", r"BrokenReward-v0 returned a non-finite reward \(NaN or inf\) at step 2 .*TransformReward"),
])
def test_an_environment_returning_nan_is_named(env_id, message):
    sampler = EnvGroupSampler(env_id, num_groups=1, num_generations=2)
    with pytest.raises(ValueError, match=message):
        sampler.sample(CategoricalMLPPolicy(3, 2))


class _ShortSampler:
    """A user's sampler that drops an output: 3 outputs where 2 groups of 2 were asked for."""

    num_groups, num_generations = 2, 2

    def sample(self, policy):
        return RolloutBatch(context=torch.zeros(2, 5, 4), tokens=torch.zeros(2, 5, dtype=torch.long),
                            mask=torch.ones(2, 5, dtype=torch.bool), group=torch.zeros(2, dtype=torch.long),
                            num_generations=2, rewards=torch.zeros(2))


def test_a_sampler_returning_the_wrong_number_of_outputs_is_named():
    trainer = GRPOLoop(LoopConfig(num_generations=2, num_groups=2), CategoricalMLPPolicy(4, 2), _ShortSampler())
    with pytest.raises(ValueError, match=r"_ShortSampler.sample returned 2 outputs in groups of 2; LoopConfig asks "
                                         r"for num_groups=2 x num_generations=2 = 4"):
        trainer.step()


def test_a_batch_not_divisible_by_the_group_size_is_refused():
    with pytest.raises(ValueError, match="batch of 5 outputs is not divisible by num_generations 2"):
        RolloutBatch(context=torch.zeros(5, 1), tokens=torch.zeros(5, 1, dtype=torch.long),
                     mask=torch.ones(5, 1, dtype=torch.bool), group=torch.zeros(5), num_generations=2, rewards=torch.zeros(5))


def test_a_dataset_without_its_answer_column_is_named():
    rows = [{"question": "1 + 1?", "solution": "2"}]
    with pytest.raises(ValueError, match=r"--dataset mine.jsonl: no 'answer' column \(columns: \['question', 'solution'\]\)"):
        chat_prompts(rows, source="--dataset mine.jsonl")


def _constant(prompts, completions, **_):
    return [1.0] * len(completions)


def _lm_trainer(score, seed=0, beta=0.0):
    model, tok = make_tiny_lm(seed=0)
    rows = [{"prompt": [{"role": "user", "content": f"say {i}"}], "answer": str(i)} for i in range(4)]
    cfg = LoopConfig(num_generations=4, num_groups=2, beta=beta, learning_rate=3e-2, seed=seed)
    sampler = LMGroupSampler(tok, rows, 2, 4, max_completion_length=6, temperature=1.0, seed=seed)
    return GRPOLoop(cfg, CausalLMPolicy(model, tok), sampler, score_fn=RewardScorer(score))


def test_groups_whose_rewards_are_all_equal_train_without_nan_and_are_counted():
    trainer = _lm_trainer(_constant, beta=0.0)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    for _ in range(2):
        m = trainer.step()
        assert m["reward/zero_std_groups"] == 1.0  # both groups, every step
        # Nothing was trained (skipped: zero advantage), so no token was scored: the statistics of
        # scored tokens are NaN (null in metrics.jsonl); every other figure is finite.
        unscored = {"policy/entropy", "policy/ratio", "policy/clip_fraction"}
        assert m["perf/trained_fraction"] == 0.0 and all(math.isnan(m[k]) for k in unscored)
        assert all(math.isfinite(v) for k, v in m.items() if k not in unscored)
        assert (trainer.last_batch.advantages == 0).all()
    # Advantage 0 everywhere and no KL term: the loss and its gradient are exactly 0, nothing moves.
    assert m["loss/policy"] == 0.0 and m["loss/grad_norm"] == 0.0
    assert all(torch.equal(b, p) for b, p in zip(before, trainer.policy.parameters()))


def _sevens(prompts, completions, **_):
    return [c[0]["content"].count("7") / max(1, len(c[0]["content"])) for c in completions]


def test_tiny_language_model_same_seed_same_metrics_other_seed_differs():
    def run(seed):
        t = _lm_trainer(_sevens, seed=seed, beta=0.04)
        rows = [t.step() for _ in range(3)]
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]

    first = run(0)
    assert run(0) == first
    assert run(1) != first
