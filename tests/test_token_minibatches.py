"""``minibatch_tokens``: minibatches of tokens (env steps) drawn across outputs, as PPO's batch_size."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, GRPOConfig, GRPOTrainer


def make_trainer(**overrides) -> GRPOTrainer:
    kw = dict(num_groups=2, num_generations=4, learning_rate=1e-2, beta=0.0, seed=0, advantage="stepwise", gamma=0.99,
              loss_type="bnpo")
    cfg = GRPOConfig(**{**kw, **overrides})
    sampler = EnvGroupSampler("CartPole-v1", cfg.num_groups, cfg.num_generations, seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    return GRPOTrainer(cfg, CategoricalMLPPolicy(sampler.obs_dim, sampler.num_actions), sampler, Accelerator(cpu=True))


def test_a_pass_splits_the_tokens_into_disjoint_near_equal_parts_of_every_output():
    trainer = make_trainer(minibatch_tokens=40)
    trainer.step()
    batch = trainer.last_batch
    parts = list(trainer._minibatches(batch, 3))
    masks = torch.stack([part.mask for part, _ in parts]).long()
    assert torch.equal(masks.sum(0).bool(), batch.mask) and masks.sum(0).max() == 1  # each token in one part
    sizes = masks.sum((1, 2)).tolist()
    assert sum(sizes) == batch.mask.sum() and max(sizes) - min(sizes) <= 1
    assert all(torch.equal(rows, torch.arange(batch.batch_size)) for _, rows in parts)  # every output forward
    assert all(torch.equal(part.advantages, batch.advantages) for part, _ in parts)


def test_optimizer_steps_are_mu_times_the_tokens_over_the_minibatch_size():
    trainer = make_trainer(minibatch_tokens=64, mu=2)
    m = trainer.step()
    tokens = int(trainer.last_batch.mask.sum())  # 8 CartPole episodes, 8 to 500 steps each
    assert m["perf/optimizer_steps"] == 2 * max(1, round(tokens / 64))
    assert make_trainer().step()["perf/optimizer_steps"] == 1


def test_one_part_holding_every_token_takes_the_same_gradient_as_whole_outputs():
    grads = []
    for over in ({}, {"minibatch_tokens": 100_000}):
        trainer = make_trainer(**over)
        step = trainer._optimizer_step

        def recording_step(step=step, trainer=trainer):
            grads.append(torch.cat([p.grad.flatten() for p in trainer.policy.parameters()]))
            return step()

        trainer._optimizer_step = recording_step
        trainer.step()
    # pi_old is scored (the policy could move between parts), so the ratio is exactly 1 as before
    assert torch.allclose(grads[0], grads[1], rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("over, message", [
    ({"minibatch_tokens": -1}, "GRPOConfig.minibatch_tokens: must be >= 0"),
    ({"minibatch_tokens": 64, "num_minibatches": 2}, "GRPOConfig.minibatch_tokens: splits the batch by tokens"),
    ({"minibatch_tokens": 64, "loss_type": "grpo"}, "GRPOConfig.minibatch_tokens: needs a token-mean loss"),
    ({"minibatch_tokens": 64, "loss_type": "dr_grpo"}, "GRPOConfig.minibatch_tokens: needs a token-mean loss"),
    ({"minibatch_tokens": 64, "importance_sampling_level": "sequence"}, "needs importance_sampling_level=token"),
    ({"minibatch_tokens": 64, "off_policy_mask_threshold": 0.5}, "cannot be used with off_policy_mask_threshold"),
])
def test_a_loss_that_whole_outputs_carry_refuses_token_minibatches(over, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**{"loss_type": "bnpo", **over})


@pytest.mark.parametrize("over", [{"loss_type": "dapo"}, {"loss_type": "cispo", "epsilon_high": 5.0},
                                  {"loss_type": "vespo"}])
def test_the_other_token_mean_losses_take_token_minibatches(over):
    m = make_trainer(minibatch_tokens=64, **over).step()
    assert m["perf/optimizer_steps"] >= 1 and m["loss/grad_norm"] > 0
