"""``target_kl``: PPO's early stop of a step's passes, as Stable-Baselines3 applies it."""

from __future__ import annotations

import warnings

import pytest
import torch
from accelerate import Accelerator

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, GRPOLoop, LoopConfig
from grpo_seq.errors import UsageError


def make_trainer(**overrides) -> GRPOLoop:
    kw = dict(num_groups=2, num_generations=4, learning_rate=1e-2, beta=0.0, seed=0, advantage="stepwise", gamma=0.99,
              loss_type="bnpo", mu=4, minibatch_tokens=32)
    cfg = LoopConfig(**{**kw, **overrides})
    sampler = EnvGroupSampler("CartPole-v1", cfg.num_groups, cfg.num_generations, seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    return GRPOLoop(cfg, CategoricalMLPPolicy(sampler.obs_dim, sampler.num_actions), sampler, Accelerator(cpu=True))


def test_every_pass_runs_without_it_and_a_small_one_stops_them_at_the_second_minibatch():
    full = make_trainer().step()
    tokens = full["perf/tokens_total"]
    assert full["perf/optimizer_steps"] == 4 * max(1, round(tokens / 32)) > 4
    # The first minibatch is scored by the policy that sampled the batch (KL 0 up to rounding) and
    # trains; one Adam step at 1e-2 moves the policy far past 1.5e-6, so the second one stops the passes.
    stopped = make_trainer(target_kl=1e-6)
    metrics = stopped.step()
    assert metrics["perf/optimizer_steps"] == 1 and metrics["perf/passes_stopped"] == 1.0
    # the logged estimate covers both minibatches scored: the second's alone is above 1.5e-6
    assert metrics["policy/approx_kl"] > 1.5e-6 / 2
    # a generous target never stops them: the same steps as without one
    generous = make_trainer(target_kl=10.0).step()
    assert generous["perf/optimizer_steps"] == full["perf/optimizer_steps"] and generous["perf/passes_stopped"] == 0.0
    assert generous["policy/approx_kl"] > 0 and "policy/approx_kl" not in full


def test_with_one_optimizer_step_a_batch_it_watches_nothing():
    # CartPole's default family takes a limit and one pass of the whole batch: that one step is
    # scored by the policy that sampled the batch, so the limit neither stops it nor is estimated
    metrics = make_trainer(target_kl=1e-6, mu=1, minibatch_tokens=0).step()
    assert metrics["perf/optimizer_steps"] == 1
    assert "policy/approx_kl" not in metrics and "perf/passes_stopped" not in metrics
    # one pass of several minibatches: the policy moves between them, and the limit acts
    one_pass = make_trainer(target_kl=1e-6, mu=1).step()
    assert one_pass["perf/optimizer_steps"] == 1 and one_pass["perf/passes_stopped"] == 1.0


def test_the_stopped_minibatchs_gradient_is_dropped():
    # Adam stepped once (the first minibatch); the second's gradient, computed before the check,
    # is cleared rather than left to add to the next step's.
    trainer = make_trainer(target_kl=1e-6)
    trainer.step()
    params = [p for p in trainer.policy.parameters() if p.requires_grad]
    optimizer = trainer.update.optimizer.optimizer
    assert all(int(optimizer.state[p]["step"]) == 1 for p in params)
    assert all(p.grad is None for p in params)


def test_a_stop_at_the_first_minibatch_leaves_the_weights_and_logs_no_step(monkeypatch):
    # A sampler whose log-probs differ from the trainer's (another precision) can put even the first
    # minibatch over a small target: no optimizer step, the weights unchanged, the step still logged.
    from grpo_seq.loop.update import PolicyUpdate

    monkeypatch.setattr(PolicyUpdate, "_over_target_kl", lambda self, stats, before: before is not None)
    trainer = make_trainer(target_kl=1e-3)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    metrics = trainer.step()
    assert metrics["perf/optimizer_steps"] == 0 and metrics["perf/passes_stopped"] == 1.0
    assert metrics["loss/grad_norm"] == 0.0 and metrics["policy/approx_kl"] >= 0
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters()))


def test_the_sb3_door_applies_it_none_is_ppos_no_limit_and_left_out_the_envs_default():
    pytest.importorskip("stable_baselines3")
    from gymnasium.envs.classic_control import CartPoleEnv
    from gymnasium.wrappers import TimeLimit

    from grpo_seq import GRPO
    from grpo_seq.envs.defaults import CARTPOLE_TARGET_KL

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "GRPO ignores these PPO arguments" warning any more
        assert GRPO("MlpPolicy", "CartPole-v1", target_kl=0.015, seed=0, device="cpu").config.target_kl == 0.015
        assert GRPO("MlpPolicy", "CartPole-v1", target_kl=None, seed=0, device="cpu").config.target_kl == 0.0
    # left out, the env's default: CartPole's limit, none for another family or an env without an id
    assert GRPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu").config.target_kl == CARTPOLE_TARGET_KL > 0
    assert GRPO("MlpPolicy", "Acrobot-v1", seed=0, device="cpu").config.target_kl == 0.0
    assert GRPO("MlpPolicy", TimeLimit(CartPoleEnv(), 500), seed=0, device="cpu").config.target_kl == 0.0
    # SB3's train/approx_kl is logged where a target watches it
    model = GRPO("MlpPolicy", "CartPole-v1", n_steps=256, n_epochs=4, target_kl=0.015, seed=0, device="cpu")
    model.learn(600)
    assert 0 <= model.logger.name_to_value["train/approx_kl"] < 1
    with pytest.raises(UsageError, match=r"target_kl: must be >= 0"):
        GRPO("MlpPolicy", "CartPole-v1", target_kl=-0.01, seed=0, device="cpu")
