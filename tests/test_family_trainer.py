"""The GRPO family inside the trainer, on CartPole and on a tiny language model: dynamic sampling
(groups dropped and drawn again, whole groups, metrics, env steps counted), TR-DPO's moving
reference, the KL in the reward, masked truncated completions, TRL's entropy bonus, DAPO's
normaliser, and every loss type taking a finite step."""

from __future__ import annotations

import copy

import pytest
import torch
from accelerate import Accelerator
from torch import nn

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, LoopConfig, GRPOLoop
from grpo_seq.math.batch import RolloutBatch
from grpo_seq.loop.dynamic_sampling import DYNAMIC_SAMPLING_METRICS, concat_groups, fill_informative
from grpo_seq.errors import ConfigError
from grpo_seq.math.objective import LOSS_TYPES

ACC = Accelerator(cpu=True)


def env_trainer(sampler_wrapper=None, **overrides):
    kw = {"num_groups": 4, "num_generations": 4, "learning_rate": 1e-2, "beta": 0.0, "seed": 0, **overrides}
    cfg = LoopConfig(**kw)
    sampler = EnvGroupSampler("CartPole-v1", cfg.num_groups, cfg.num_generations, seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    policy = CategoricalMLPPolicy(sampler.obs_dim, sampler.num_actions)
    return GRPOLoop(cfg, policy, sampler_wrapper(sampler) if sampler_wrapper else sampler, ACC)


class Wrapped:
    """A sampler that edits each batch its inner sampler draws, and records what it handed out
    (its ``step_budget``, a job's budget of env steps, is the inner sampler's)."""

    step_budget = property(lambda self: self.inner.step_budget,
                           lambda self, v: setattr(self.inner, "step_budget", v))

    def __init__(self, inner, edit):
        self.inner, self.edit, self.num_groups, self.num_generations = inner, edit, inner.num_groups, inner.num_generations
        self.drawn: list[RolloutBatch] = []

    def sample(self, policy):
        batch = self.edit(self.inner.sample(policy))
        self.drawn.append(batch)
        return batch


def flatten_first_group(batch):
    batch.rewards[: batch.num_generations] = 7.0  # group 0's members all earn the same: no signal
    return batch


def weights(trainer):
    return [p.detach().clone() for p in trainer.policy.parameters()]


def scripted(rewards: list[list[float]], lengths: list[int], G: int = 2) -> RolloutBatch:
    """A batch of len(rewards) groups of G outputs, output i of length lengths[i] (T = max)."""
    B, T = len(rewards) * G, max(lengths)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    return RolloutBatch(context=torch.randn(B, T, 3), tokens=torch.ones(B, T, dtype=torch.long), mask=mask,
                        group=torch.arange(len(rewards)).repeat_interleave(G), num_generations=G,
                        rewards=torch.tensor(rewards).flatten(), metrics={"x": float(T)})


def test_fill_informative_keeps_whole_informative_groups_and_counts_by_hand():
    # draw 1: groups (flat, good); draw 2: (good, good, T = 5). Two wanted: draw 1's good group, then draw 2's
    # first; drawn 4, dropped 2 (one flat, one surplus), 1 extra round; unseen tokens: (2+2) + (5+5) = 14
    draws = iter([scripted([[1, 1], [0, 1]], [2, 2, 3, 3]), scripted([[0, 2], [3, 4]], [4, 4, 5, 5])])
    batch, unseen = fill_informative(lambda: next(draws), num_groups=2, max_rounds=3)
    assert batch.rewards.tolist() == [0, 1, 0, 2] and batch.tokens.shape == (4, 5)  # padded to draw 2's T
    assert batch.mask.sum(-1).tolist() == [3, 3, 4, 4] and batch.group.tolist() == [0, 0, 1, 1]
    assert [batch.metrics[k] for k in DYNAMIC_SAMPLING_METRICS] == [4.0, 2.0, 1.0]
    assert unseen == 14 and batch.metrics["x"] == 4.0  # the draws' own metrics (T = 3 and 5): their mean
    # rounds run out with nothing kept: the last draw, whole (it trains nothing)
    flat = scripted([[1, 1], [2, 2]], [2, 2, 2, 2])
    batch, unseen = fill_informative(lambda: flat, num_groups=2, max_rounds=0)
    assert batch.num_groups == 2 and unseen == 0 and batch.metrics["dynamic_sampling/groups_dropped"] == 0.0


def test_concat_groups_pads_text_prompts_on_the_left_and_tokens_on_the_right():
    a, b = scripted([[0, 1]], [1, 1]), scripted([[0, 1]], [3, 2])
    a.context, a.prompt_mask = torch.tensor([[5, 6], [5, 6]]), torch.ones(2, 2, dtype=torch.bool)
    b.context, b.prompt_mask = torch.tensor([[7], [7]]), torch.ones(2, 1, dtype=torch.bool)
    out = concat_groups([a, b])
    assert out.context.tolist() == [[5, 6], [5, 6], [0, 7], [0, 7]]
    assert out.prompt_mask.tolist() == [[True, True]] * 2 + [[False, True]] * 2
    assert out.mask.tolist() == [[True, False, False]] * 2 + [[True, True, True], [True, True, False]]


def test_dynamic_sampling_in_the_trainer_draws_again_and_counts_every_step():
    # every draw's group 0 is flat: 3 informative groups of 4 wanted -> a second draw, 1 taken from it;
    # drawn 8, dropped 4, 1 round; the env steps count both draws
    trainer = env_trainer(lambda s: Wrapped(s, flatten_first_group), dynamic_sampling=True, max_resample_rounds=2)
    m = trainer.step()
    drawn = trainer.sampler.drawn
    assert len(drawn) == 2
    assert (m["dynamic_sampling/groups_drawn"], m["dynamic_sampling/groups_dropped"], m["dynamic_sampling/rounds"]) \
        == (8.0, 4.0, 1.0)
    assert m["perf/tokens_total"] == sum(b.num_tokens for b in drawn)
    assert trainer.last_batch.num_groups == 4 and m["reward/zero_std_groups"] == 0.0
    assert 7.0 not in trainer.last_batch.rewards.tolist()


def test_dynamic_sampling_stays_within_the_env_step_budget():
    # a job gives the sampler the env steps left: 40 for 16 episodes cuts each at 40 // 16 = 2 steps, so a draw
    # takes at most 32 and leaves 8, too few for 16 more episodes: no second draw, however few groups were kept
    trainer = env_trainer(lambda s: Wrapped(s, flatten_first_group), dynamic_sampling=True, max_resample_rounds=5)
    trainer.sampler.step_budget = 40
    m = trainer.step()
    assert len(trainer.sampler.drawn) == 1 and m["dynamic_sampling/rounds"] == 0.0
    assert m["perf/tokens_total"] <= 40 and trainer.sampler.step_budget == 40  # the job's value, restored


def test_ref_sync_with_an_alpha_mixes_the_reference_toward_the_policy():
    # alpha 0.5 every step: after one step theta_ref = (theta_0 + theta_1) / 2
    trainer = env_trainer(beta=0.1, ref_sync_alpha=0.5, ref_sync_steps=1)
    before = weights(trainer)
    trainer.step()
    for r, b, a in zip(trainer.ref_policy.parameters(), before, weights(trainer)):
        torch.testing.assert_close(r, (b + a) / 2)


def test_kl_in_reward_penalises_rewards_and_leaves_the_loss_without_kl():
    trainer = env_trainer(beta=0.5, kl_in_reward=True, learning_rate=5e-2)
    first = trainer.step()
    assert first["reward/kl_penalty"] == 0.0  # the policy is the reference at step 0
    later = [trainer.step() for _ in range(3)][-1]
    assert later["reward/kl_penalty"] > 0.0 and later["policy/kl"] > 0.0  # k3 >= 0, and the policy moved


def test_mask_truncated_completions():
    with pytest.raises(ConfigError, match="mask_truncated_completions"):
        env_trainer(mask_truncated_completions=True).step()  # env rollouts mark no truncation

    def all_truncated(batch):
        batch.truncated = torch.ones(batch.batch_size, dtype=torch.bool)
        return batch

    trainer = env_trainer(lambda s: Wrapped(s, all_truncated), mask_truncated_completions=True)
    before = weights(trainer)
    m = trainer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, weights(trainer)))  # nothing left to train on
    assert m["policy/completion_length"] > 0  # the metrics still see the outputs as sampled


def test_the_token_mean_entropy_bonus_needs_an_entropy_with_a_gradient_and_adapts_on_an_mlp():
    cfg = LoopConfig(num_groups=4, num_generations=4, ent_coef=0.01, ent_mean="token")
    sampler = EnvGroupSampler("CartPole-v1", 4, 4, seed=0)
    with pytest.raises(ConfigError, match="ent_coef"):
        GRPOLoop(cfg, nn.Linear(4, 2), sampler, ACC)
    trainer = env_trainer(ent_coef=0.01, ent_mean="token", use_adaptive_entropy=True, entropy_target=10.0,
                          ent_coef_delta=0.01)
    # logged after each optimizer step's update, as TRL logs it: CartPole's entropy (<= ln 2) is below the
    # target 10, so 0.01 + 0.01 after step 1 and + 0.01 after step 2 (step 1 itself applied none: nothing measured)
    assert trainer.step()["policy/entropy_coef"] == pytest.approx(0.02)
    assert trainer.step()["policy/entropy_coef"] == pytest.approx(0.03)


def test_dapo_is_bnpo_with_one_minibatch_on_one_process():
    a, b = env_trainer(loss_type="dapo"), env_trainer(loss_type="bnpo")
    a.step(), b.step()
    assert all(torch.equal(x, y) for x, y in zip(weights(a), weights(b)))


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_every_loss_type_takes_a_finite_step_with_the_family_options(loss_type):
    extra = {"epsilon_high": 5.0 if loss_type == "cispo" else 0.28}
    if loss_type not in ("cispo", "sapo", "vespo"):  # the clipped surrogate's: two-sided clipping
        extra["delta"] = 2.0
    trainer = env_trainer(loss_type=loss_type, mu=2, beta=0.02, importance_sampling_level="sequence",
                          off_policy_mask_threshold=0.5, use_bias_correction_kl=True, kl_estimator="k2",
                          top_entropy_quantile=0.5, scale_rewards="batch", **extra)
    before = weights(trainer)
    m = trainer.step()
    assert all(torch.isfinite(torch.tensor(v)) for k, v in m.items() if k.startswith(("loss/", "policy/")))
    assert not all(torch.equal(x, y) for x, y in zip(before, weights(trainer)))


def test_a_language_model_trains_with_dynamic_sampling_and_the_text_options():
    from grpo_seq import CausalLMPolicy, RewardScorer
    from tiny_lm import length_reward, make_sampler, make_tiny_lm

    model, tok = make_tiny_lm()
    cfg = LoopConfig(num_groups=2, num_generations=4, learning_rate=1e-2, beta=0.0, seed=0, loss_type="cispo",
                     epsilon_high=5.0, dynamic_sampling=True, max_resample_rounds=1, mask_truncated_completions=True,
                     top_entropy_quantile=0.5, multi_objective_aggregation="normalize_then_sum")
    scorer = RewardScorer([length_reward, copy.deepcopy(length_reward)], weights=[1.0, 0.5])

    def score_and_flatten_group_0(batch):  # one informative group per draw: the step needs two draws
        batch = scorer(batch)
        batch.rewards[:4], batch.reward_components[:4] = 1.0, 1.0
        return batch

    score_and_flatten_group_0.weights = scorer.weights
    trainer = GRPOLoop(cfg, CausalLMPolicy(model, tok), make_sampler(tok, seed=0), ACC,
                          score_fn=score_and_flatten_group_0)
    m = trainer.step()
    assert (m["dynamic_sampling/groups_drawn"], m["dynamic_sampling/groups_dropped"]) == (4.0, 2.0)
    assert torch.isfinite(torch.tensor(m["loss/policy"]))
    kept = trainer.last_batch  # one group from each draw, prompts and completions padded to the longer
    assert kept.num_groups == 2 and len(kept.text) == kept.batch_size == 8 and 1.0 not in kept.rewards.tolist()


def test_a_checkpoint_keeps_the_mixed_reference_and_the_entropy_controller(tmp_path):
    opts = dict(beta=0.1, ref_sync_alpha=0.6, ref_sync_steps=1, ent_coef=0.01, ent_mean="token", use_adaptive_entropy=True,
                entropy_target=10.0)
    a = env_trainer(output_dir=str(tmp_path / "a"), **opts)
    a.step()
    folder = a.save_checkpoint()
    b = env_trainer(output_dir=str(tmp_path / "b"), **opts)
    b.resume(folder)
    assert b.entropy_control == a.entropy_control and b.entropy_control.coef == pytest.approx(0.015)  # 0.01 + 0.005
    for x, y in zip(b.ref_policy.parameters(), a.ref_policy.parameters()):
        assert torch.equal(x, y)  # the mixed reference, not the initial policy
    a.close(), b.close()
