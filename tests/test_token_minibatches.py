"""``minibatch_tokens``: minibatches of tokens (env steps) drawn across outputs, as PPO's batch_size."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, LoopConfig, GRPOLoop


def make_trainer(**overrides) -> GRPOLoop:
    kw = dict(num_groups=2, num_generations=4, learning_rate=1e-2, beta=0.0, seed=0, advantage="stepwise", gamma=0.99,
              loss_type="bnpo")
    cfg = LoopConfig(**{**kw, **overrides})
    sampler = EnvGroupSampler("CartPole-v1", cfg.num_groups, cfg.num_generations, seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    return GRPOLoop(cfg, CategoricalMLPPolicy(sampler.obs_dim, sampler.num_actions), sampler, Accelerator(cpu=True))


class MaskedScoring(CategoricalMLPPolicy):
    """The same MLP, scored as any sequence policy is: every output forward under a mask."""

    scores_steps_independently = False


def masked_trainer(**overrides) -> GRPOLoop:
    trainer = make_trainer(**overrides)
    torch.manual_seed(trainer.config.seed)
    policy = MaskedScoring(trainer.sampler.obs_dim, trainer.sampler.num_actions)
    return GRPOLoop(trainer.config, policy, EnvGroupSampler("CartPole-v1", 2, 4, seed=0), Accelerator(cpu=True))


def test_a_pass_splits_the_tokens_into_disjoint_near_equal_parts_of_every_output():
    trainer = masked_trainer(minibatch_tokens=40)
    trainer.step()
    batch = trainer.last_batch
    live = torch.ones(batch.batch_size, dtype=torch.bool)
    parts = list(trainer.update.minibatches(batch, 3, live))
    masks = torch.stack([part.mask for part, _, _ in parts]).long()
    assert torch.equal(masks.sum(0).bool(), batch.mask) and masks.sum(0).max() == 1  # each token in one part
    sizes = masks.sum((1, 2)).tolist()
    assert sum(sizes) == batch.mask.sum() and max(sizes) - min(sizes) <= 1
    assert all(torch.equal(rows, torch.arange(batch.batch_size)) for _, rows, _ in parts)  # every output forward
    assert all(torch.equal(part.advantages, batch.advantages) for part, _, _ in parts)


def test_an_mlp_policy_gets_each_part_as_one_step_outputs_holding_those_steps():
    trainer = make_trainer(minibatch_tokens=40)
    trainer.step()
    batch = trainer.last_batch
    live = torch.arange(batch.batch_size) != 1  # output 1 has no gradient
    parts = list(trainer.update.minibatches(batch, 3, live))

    def step(obs, action, advantage, group, has_grad):
        return (*[round(float(x), 6) for x in obs], int(action), round(float(advantage), 6), int(group), bool(has_grad))

    got = sorted(step(part.context[k, 0], part.tokens[k, 0], part.advantages[k, 0], part.group[k], part_live[k])
                 for part, rows, part_live in parts for k in range(part.batch_size))
    want = sorted(step(batch.context[r, t], batch.tokens[r, t], batch.advantages[r, t], batch.group[r], live[r])
                  for r, t in batch.mask.nonzero())
    assert got == want  # every step once, with its own observation, action, advantage, group and gradient flag
    for part, rows, _ in parts:
        assert part.tokens.shape[1] == 1 and bool(part.mask.all()) and torch.equal(rows, torch.arange(len(rows)))
    sizes = [p.batch_size for p, _, _ in parts]
    assert max(sizes) - min(sizes) <= 1


def test_one_step_outputs_train_exactly_as_every_output_forward_under_a_mask():
    a, b = make_trainer(minibatch_tokens=64, mu=2), masked_trainer(minibatch_tokens=64, mu=2)
    for _ in range(2):
        ma, mb = a.step(), b.step()
        assert ma["perf/optimizer_steps"] == mb["perf/optimizer_steps"] > 2
    for x, y in zip(a.policy.parameters(), b.policy.parameters()):
        assert torch.allclose(x, y, atol=1e-5)  # the same sums in another order


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
        step = trainer.update.optimizer_step

        def recording_step(step=step, trainer=trainer):
            grads.append(torch.cat([p.grad.flatten() for p in trainer.policy.parameters()]))
            return step()

        trainer.update.optimizer_step = recording_step
        trainer.step()
    # pi_old is scored (the policy could move between parts), so the ratio is exactly 1 as before
    assert torch.allclose(grads[0], grads[1], rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("over, message", [
    ({"minibatch_tokens": -1}, "LoopConfig.minibatch_tokens: must be >= 0"),
    ({"minibatch_tokens": 64, "num_minibatches": 2}, "LoopConfig.minibatch_tokens: splits the batch by tokens"),
    ({"minibatch_tokens": 64, "loss_type": "grpo"}, "LoopConfig.minibatch_tokens: needs a token-mean loss"),
    ({"minibatch_tokens": 64, "loss_type": "dr_grpo"}, "LoopConfig.minibatch_tokens: needs a token-mean loss"),
    ({"minibatch_tokens": 64, "importance_sampling_level": "sequence"}, "needs importance_sampling_level=token"),
    ({"minibatch_tokens": 64, "off_policy_mask_threshold": 0.5}, "cannot be used with off_policy_mask_threshold"),
])
def test_a_loss_that_whole_outputs_carry_refuses_token_minibatches(over, message):
    with pytest.raises(ValueError, match=message):
        LoopConfig(**{"loss_type": "bnpo", **over})


@pytest.mark.parametrize("over", [{"loss_type": "dapo"}, {"loss_type": "cispo", "epsilon_high": 5.0},
                                  {"loss_type": "vespo"}])
def test_the_other_token_mean_losses_take_token_minibatches(over):
    m = make_trainer(minibatch_tokens=64, **over).step()
    assert m["perf/optimizer_steps"] >= 1 and m["loss/grad_norm"] > 0
