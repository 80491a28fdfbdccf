"""The trainer's behaviour on CartPole: KL at step 0, pi_old kept for mu > 1, learning, determinism."""

import copy
import json
import math

import numpy as np
import pytest
import torch
from accelerate import Accelerator

from grpo_seq import CategoricalMLPPolicy, EnvGroupSampler, LoopConfig, GRPOLoop, compute_advantages, load_policy
from grpo_seq.scoring.evaluation import PolicyEvaluator
from safetensors.torch import load_file


def make_trainer(tmp_path=None, **overrides):
    kw = dict(num_groups=4, num_generations=8, learning_rate=1e-2, beta=0.0, seed=0)
    kw.update(overrides)
    cfg = LoopConfig(output_dir=str(tmp_path) if tmp_path else None, **kw)
    sampler = EnvGroupSampler("CartPole-v1", cfg.num_groups, cfg.num_generations, seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    policy = CategoricalMLPPolicy(sampler.obs_dim, sampler.num_actions)
    return GRPOLoop(cfg, policy, sampler, Accelerator(cpu=True))


class RecordingSampler:
    """Wraps a sampler and keeps the last batch it handed out (the trainer fills it in place)."""

    def __init__(self, inner):
        self.inner, self.num_groups, self.num_generations = inner, inner.num_groups, inner.num_generations

    def sample(self, policy):
        self.policy_before = copy.deepcopy(policy)
        self.batch = self.inner.sample(policy)
        return self.batch


def test_kl_is_zero_at_the_first_step_and_positive_after_learning():
    trainer = make_trainer(beta=0.1, learning_rate=3e-2)
    assert trainer.ref_policy is not None
    first = trainer.step()
    assert first["policy/kl"] == 0.0
    for _ in range(3):
        later = trainer.step()
    assert later["policy/kl"] > 0.0


def test_no_reference_policy_when_beta_is_zero():
    assert make_trainer(beta=0.0).ref_policy is None


def test_mu_greater_than_one_keeps_sampling_time_logprobs():
    trainer = make_trainer(mu=3, learning_rate=3e-2)
    trainer.sampler = rec = RecordingSampler(trainer.sampler)
    m = trainer.step()
    b = rec.batch
    with torch.no_grad():
        expected, _ = rec.policy_before(b)
    torch.testing.assert_close(b.old_logp, expected)
    # the policy moved during the 3 passes while old_logp stayed put, so ratios left 1
    with torch.no_grad():
        after, _ = trainer.policy(b)
    assert not torch.allclose(after[b.mask], b.old_logp[b.mask])
    assert m["policy/ratio"] != 1.0


def test_mu_one_computes_no_old_logprobs():
    trainer = make_trainer(mu=1)
    trainer.sampler = rec = RecordingSampler(trainer.sampler)
    m = trainer.step()
    assert rec.batch.old_logp is None
    assert m["policy/ratio"] == 1.0 and m["policy/clip_fraction"] == 0.0


def test_live_outcome_advantages_match_hand_statistics_of_episode_lengths():
    # CartPole pays 1 per step, so an episode's return is its length and its outcome
    # advantage is (L - mean L) / std L over its group, with numpy's Bessel-corrected std.
    trainer = make_trainer()
    batch = trainer.sampler.sample(trainer.policy)
    adv = compute_advantages(batch, trainer.config)
    L = batch.lengths().numpy().reshape(batch.num_groups, batch.num_generations).astype(np.float64)
    for g in range(batch.num_groups):
        expected = (L[g] - L[g].mean()) / L[g].std(ddof=1)
        for j in range(batch.num_generations):
            i = g * batch.num_generations + j
            row = adv[i][batch.mask[i]]
            np.testing.assert_allclose(row.numpy(), expected[j], rtol=1e-5)
            assert (adv[i][~batch.mask[i]] == 0).all()


def test_live_stepwise_advantages_train_the_longest_members_tail_only_with_absorb_ended():
    # CartPole, gamma 1: past the second-longest member's end only the longest runs. Without
    # absorb_ended nobody is compared there (advantage 0); with it the ended members count with
    # return-to-go 0, so the survivor's remaining steps are positive.
    trainer = make_trainer(advantage="stepwise")
    batch = trainer.sampler.sample(trainer.policy)
    L = batch.lengths().reshape(batch.num_groups, batch.num_generations)
    g = int(torch.argmax(L.sort(dim=1).values[:, -1] - L.sort(dim=1).values[:, -2]))  # the widest gap
    longest, second = L[g].sort().values[-1].item(), L[g].sort().values[-2].item()
    assert longest > second
    i = g * batch.num_generations + int(L[g].argmax())
    for absorb, check in [(False, lambda a: (a == 0).all()), (True, lambda a: (a > 0).all())]:
        trainer.config.absorb_ended = absorb
        tail = compute_advantages(batch, trainer.config)[i, second:longest]
        assert check(tail), (absorb, tail)


def test_cartpole_learns_well_above_random():
    # A random policy balances ~22 steps. 12 iterations (~30k env steps) must more than
    # quadruple that in greedy evaluation; a sign error in the loss or advantages would not.
    trainer = make_trainer(seed=0)
    evaluate = PolicyEvaluator("CartPole-v1", 10, seed=123)
    before = evaluate(trainer.policy).mean()
    for _ in range(12):
        m = trainer.step()
    after = evaluate(trainer.policy).mean()
    assert before < 60
    assert after > 100, f"greedy return after training {after:.1f} (before {before:.1f})"
    assert m["reward/mean"] > 60


def _run_metrics(seed, steps=4):
    trainer = make_trainer(seed=seed, mu=2, num_minibatches=2)
    rows = [trainer.step() for _ in range(steps)]
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def test_same_seed_same_metrics_and_different_seed_differs():
    a, b, c = _run_metrics(0), _run_metrics(0), _run_metrics(1)
    assert a == b
    assert a != c


def test_saved_policy_loads_and_acts_the_same(tmp_path):
    trainer = make_trainer(tmp_path)
    trainer.step()
    path = trainer.save()
    loaded = load_policy(path)
    obs = torch.randn(16, 4)
    torch.testing.assert_close(loaded.logits(obs), trainer.policy.logits(obs))
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1
    assert (tmp_path / "config.json").exists()


def test_sampler_and_config_must_agree():
    cfg = LoopConfig(num_groups=2, num_generations=4)
    with pytest.raises(ValueError, match="num_groups=2, num_generations=4"):
        GRPOLoop(cfg, CategoricalMLPPolicy(4, 2), EnvGroupSampler("CartPole-v1", 3, 4))


def test_process_supervision_is_blind_on_cartpole_and_leaves_the_policy_unchanged():
    # Every CartPole step pays 1: the paper's process normalisation makes every advantage 0,
    # so the update is exactly zero (the trap that made outcome the default).
    trainer = make_trainer(advantage="process")
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    trainer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters()))


def test_padding_never_reaches_the_gradient():
    from grpo_seq.math.objective import grpo_loss

    trainer = make_trainer()
    batch = trainer.sampler.sample(trainer.policy)
    assert (~batch.mask).any(), "the batch needs padded positions for this test"
    batch.advantages = compute_advantages(batch, trainer.config)

    def grads(b):
        trainer.policy.zero_grad()
        logp, _ = trainer.policy(b)
        loss, _ = grpo_loss(logp, logp.detach(), b.advantages, b.mask, eps_low=0.2)
        loss.backward()
        return [p.grad.clone() for p in trainer.policy.parameters()]

    clean = grads(batch)
    # garbage observations and flipped actions after each episode's end
    batch.context[~batch.mask] = 1e3
    batch.tokens[~batch.mask] = 1 - batch.tokens[~batch.mask]
    for a, b in zip(clean, grads(batch)):
        torch.testing.assert_close(a, b)


class EqualRewardSampler:
    """Wraps a sampler and gives the groups ``flatten[call]`` equal rewards (zero advantages)."""

    def __init__(self, inner, flatten):
        self.inner, self.flatten, self.calls = inner, flatten, 0
        self.num_groups, self.num_generations = inner.num_groups, inner.num_generations

    def sample(self, policy):
        batch = self.inner.sample(policy)
        G = batch.num_generations
        for g in self.flatten[self.calls]:
            batch.rewards[g * G:(g + 1) * G] = 7.0
        self.calls += 1
        return batch


def _skip_pair(flatten, **overrides):
    """Two runs on the same batches, zero-advantage outputs skipped or trained: their metrics, the
    gradient of every optimizer step, and the trainer."""
    runs = []
    for skip in (True, False):
        trainer = make_trainer(advantage="outcome", skip_zero_advantage=skip, **overrides)
        trainer.sampler = EqualRewardSampler(trainer.sampler, flatten)
        grads, optimizer_step = [], trainer.update.optimizer_step

        def recording_step():
            grads.append(torch.cat([p.grad.flatten() for p in trainer.policy.parameters()]))
            return optimizer_step()

        trainer.update.optimizer_step = recording_step
        metrics = [trainer.step() for _ in flatten]
        runs.append((metrics, torch.stack(grads), trainer))
    return runs


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
@pytest.mark.parametrize("mu, num_minibatches, micro", [(1, 1, 0), (2, 2, 3)])
def test_skipping_zero_advantage_outputs_leaves_the_update_unchanged(loss_type, mu, num_minibatches, micro):
    # Groups 0 and 2 of 4 have equal rewards at every step: half the outputs carry no gradient.
    flatten = [[0, 2], [0, 2], [0, 2]]
    (m_skip, g_skip, t_skip), (m_all, g_all, _) = _skip_pair(
        flatten, loss_type=loss_type, mu=mu, num_minibatches=num_minibatches, micro_batch_size=micro)
    # at most half: an output whose reward equals its group's mean has advantage 0 too
    assert all(0.4 <= m["perf/trained_fraction"] <= 0.5 for m in m_skip)
    last = t_skip.last_batch
    trained = ((last.advantages != 0) & last.mask).any(-1)
    assert m_skip[-1]["perf/trained_fraction"] == trained.float().mean()
    assert [m["perf/trained_fraction"] for m in m_all] == [1.0] * 3
    # The same gradient at every optimizer step: to float noise at the first (same weights); at
    # later ones Adam has turned that noise in near-zero components into weights 1e-5 apart. A
    # wrong denominator would be off by a third or more.
    rel = (g_skip - g_all).norm(dim=1) / g_all.norm(dim=1)
    assert rel[0] < 1e-5 and rel.max() < 1e-3
    for a, b in zip(m_skip, m_all):
        assert a["loss/policy"] == pytest.approx(b["loss/policy"], rel=1e-4, abs=1e-7)
        assert a["loss/grad_norm"] == pytest.approx(b["loss/grad_norm"], rel=1e-4)
    if mu > 1:  # pi_old is scored for the trained outputs only; the others are marked unscored
        G = t_skip.config.num_generations
        old = t_skip.last_batch.old_logp.reshape(4, G, -1)
        assert old[[0, 2]].isnan().all() and not old[trained.reshape(4, G)].isnan().any()


def test_a_step_with_nothing_to_train_still_moves_adam_like_a_zero_gradient():
    # Step 2 has only equal-reward groups: no forward or backward at all, yet Adam's moments
    # from step 1 move the parameters exactly as a computed zero gradient would.
    (m_skip, g_skip, t_skip), (m_all, g_all, t_all) = _skip_pair([[], [0, 1, 2, 3]])
    assert m_skip[1]["perf/trained_fraction"] == 0.0 and m_all[1]["perf/trained_fraction"] == 1.0
    assert torch.equal(g_skip, g_all) and not g_skip[1].any()
    for a, b in zip(t_skip.policy.parameters(), t_all.policy.parameters()):
        assert torch.equal(a, b)
    assert m_skip[1]["loss/grad_norm"] == 0.0
    assert math.isnan(m_skip[1]["policy/entropy"]) and not math.isnan(m_all[1]["policy/entropy"])


@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_a_batch_without_signal_takes_no_optimizer_step_when_asked(beta):
    # Step 2 has only equal-reward groups. By default Adam's momentum (and with beta > 0 the KL
    # term) still moves the weights; skip_steps_without_signal leaves them exactly as step 1 did.
    moved = {}
    for skip in (False, True):
        trainer = make_trainer(advantage="outcome", beta=beta, skip_steps_without_signal=skip)
        trainer.sampler = EqualRewardSampler(trainer.sampler, [[], [0, 1, 2, 3]])
        first = trainer.step()
        after_first = [p.detach().clone() for p in trainer.policy.parameters()]
        second = trainer.step()
        moved[skip] = any(not torch.equal(a, p) for a, p in zip(after_first, trainer.policy.parameters()))
        assert first["perf/optimizer_steps"] == 1.0
        assert second["perf/optimizer_steps"] == (0.0 if skip else 1.0)
    assert moved == {False: True, True: False}


def test_nothing_is_skipped_when_the_kl_term_has_a_gradient():
    (m_skip, _, _), _ = _skip_pair([[0, 2], [0, 2]], beta=0.1)
    assert [m["perf/trained_fraction"] for m in m_skip] == [1.0, 1.0]


def test_adam_betas_reach_the_optimizer():
    """Adam's first update is g / |g| whatever the betas (bias correction); from the second on
    the betas weigh the two gradients, so two trainers that differ only in betas split there."""
    default = make_trainer(num_groups=1, num_generations=2)
    custom = make_trainer(num_groups=1, num_generations=2, adam_beta1=0.5, adam_beta2=0.95)
    assert custom.optimizer.param_groups[0]["betas"] == (0.5, 0.95)
    assert default.optimizer.param_groups[0]["betas"] == (0.9, 0.999)
    default.step(), custom.step()
    for a, b in zip(default.policy.parameters(), custom.policy.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)
    default.step(), custom.step()
    gap = max((a - b).abs().max().item() for a, b in zip(default.policy.parameters(), custom.policy.parameters()))
    assert gap > 1e-4


class NaNRewards(RecordingSampler):
    """Rewards become NaN from the ``after``-th batch on (a reward function gone wrong)."""

    def __init__(self, inner, after):
        super().__init__(inner)
        self.after, self.calls = after, 0

    def sample(self, policy):
        batch = super().sample(policy)
        self.calls += 1
        if self.calls > self.after:
            batch.rewards = torch.full_like(batch.rewards, float("nan"))
            batch.step_rewards = torch.full_like(batch.step_rewards, float("nan"))
        return batch


def test_nan_gradients_skip_the_step_then_stop_the_run_with_finite_weights(tmp_path):
    from grpo_seq.errors import NonFiniteError

    trainer = make_trainer(tmp_path, advantage="outcome", max_nonfinite_steps=2)
    trainer.sampler = NaNRewards(trainer.sampler, after=1)
    trainer.step()
    before = copy.deepcopy(trainer.policy.state_dict())
    adam_before = copy.deepcopy(trainer.optimizer.state_dict()["state"])
    m = trainer.step()  # NaN advantages: the step is skipped, nothing moves
    assert m["loss/nonfinite_steps"] == 1.0
    for k, v in trainer.policy.state_dict().items():
        assert torch.equal(v, before[k])
    assert all(torch.equal(adam_before[i]["exp_avg"], s["exp_avg"])
               for i, s in trainer.optimizer.state_dict()["state"].items())
    with pytest.raises(NonFiniteError, match="NaN or inf in 2 optimizer steps in a row"):
        trainer.step()
    path = trainer.save_checkpoint()  # the weights are the last finite ones: saving them is allowed
    assert all(torch.isfinite(t).all() for t in load_file(str(path / "policy" / "model.safetensors")).values())


def test_weights_holding_nan_are_never_saved(tmp_path):
    from grpo_seq.errors import NonFiniteError

    trainer = make_trainer(tmp_path)
    with torch.no_grad():
        next(trainer.policy.parameters())[0, 0] = float("inf")
    with pytest.raises(NonFiniteError, match="weights hold NaN or inf"):
        trainer.save()
    with pytest.raises(NonFiniteError, match="weights hold NaN or inf"):
        trainer.save_checkpoint()
    assert not (tmp_path / "policy").exists() and not (tmp_path / "checkpoints").exists()


def test_finite_weights_whose_sum_overflows_are_saved(tmp_path):
    trainer = make_trainer(tmp_path)
    with torch.no_grad():
        first = next(trainer.policy.parameters())
        first[0, :2] = 3e38  # each finite, their float32 sum inf
    assert not torch.isfinite(first.sum())
    trainer.save()
    assert (tmp_path / "policy").exists()


def test_a_folder_holding_another_run_is_refused_and_overwrite_replaces_it(tmp_path):
    from grpo_seq.errors import RunDirError

    first = make_trainer(tmp_path)
    first.step()
    first.save_checkpoint()
    first.close()
    metrics = (tmp_path / "metrics.jsonl").read_text()
    second = make_trainer(tmp_path, seed=1)
    with pytest.raises(RunDirError, match=f"--output_dir {tmp_path} already holds a run .*--resume_from.*--overwrite"):
        second.step()
    assert (tmp_path / "metrics.jsonl").read_text() == metrics  # the first run's files unchanged
    third = make_trainer(tmp_path, seed=1, overwrite=True)
    third.step()
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1


def test_a_run_that_stopped_before_its_first_checkpoint_can_be_rerun_into_its_folder(tmp_path, capsys):
    first = make_trainer(tmp_path)
    first.step()  # then, say, a reward function raises: config.json and metrics.jsonl, no checkpoint
    first.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "metrics.jsonl"]
    again = make_trainer(tmp_path, seed=1)
    again.step()
    assert "replacing a run that stopped before its first checkpoint" in capsys.readouterr().out
    assert json.loads((tmp_path / "config.json").read_text())["seed"] == 1
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1


def test_resume_refuses_other_options_by_name_and_lists_allowed_changes(tmp_path, capsys):
    from grpo_seq.io.checkpoint import CheckpointError

    first = make_trainer(tmp_path)
    first.step()
    folder = first.save_checkpoint()
    first.close()
    with pytest.raises(CheckpointError, match=r"--num_generations was 8, is 4 now; --learning_rate was 0.01, is 0.02 now"):
        make_trainer(tmp_path, num_generations=4, learning_rate=2e-2, resume_from=str(tmp_path)).resume(tmp_path)
    resumed = make_trainer(tmp_path, save_total_limit=5, resume_from=str(tmp_path))
    resumed.resume(tmp_path)
    assert "resuming with changed options: --save_total_limit 2 -> 5" in capsys.readouterr().out
    assert resumed.step_count == 1 and folder.exists()


def test_a_missing_resume_from_creates_nothing(tmp_path):
    from grpo_seq.io.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="no such checkpoint or run folder"):
        make_trainer(tmp_path / "run", resume_from=str(tmp_path / "typo"))
    assert list(tmp_path.iterdir()) == []


class EqualRewards(RecordingSampler):
    """Every member of every group earns the same reward: no group carries a signal."""

    def sample(self, policy):
        batch = super().sample(policy)
        batch.rewards = torch.ones_like(batch.rewards)
        batch.step_rewards = torch.zeros_like(batch.step_rewards)
        return batch


def test_a_run_without_signal_says_so_once(caplog):
    trainer = make_trainer(num_groups=2, num_generations=2, advantage="outcome")
    trainer.sampler = EqualRewards(trainer.sampler)
    rows = [trainer.step() for _ in range(10)]
    assert [r["reward/zero_std_groups"] for r in rows] == [1.0] * 10
    assert rows[-1]["reward/flat_steps_in_a_row"] == 10.0 and rows[-1]["perf/trained_fraction"] == 0.0
    assert trainer.signal.message.startswith("no learning signal")
    assert sum("no learning signal" in r.message for r in caplog.records) == 1


def test_an_entropy_bonus_trains_every_output_and_keeps_the_policy_spread():
    # Process advantages are 0 on CartPole (every step pays 1), so only the bonus moves the weights:
    # nothing is skipped, and a policy started far from uniform (head bias 3 for "left":
    # p = 0.95, entropy about 0.2 nats) is pushed back toward it.
    trainer = make_trainer(advantage="process", ent_coef=0.5, learning_rate=5e-2)
    with torch.no_grad():
        trainer.policy.net[-1].bias.copy_(torch.tensor([3.0, 0.0]))
    first = trainer.step()
    assert first["perf/trained_fraction"] == 1.0 and first["loss/grad_norm"] > 0
    for _ in range(5):
        last = trainer.step()
    assert first["policy/entropy"] < 0.3 and last["policy/entropy"] > first["policy/entropy"] + 0.2


def test_ent_coef_is_refused_for_a_policy_without_a_differentiable_entropy():
    class NoEntropyGrad(CategoricalMLPPolicy):
        entropy_has_grad = False

    cfg = LoopConfig(num_groups=1, num_generations=2, beta=0.0, ent_coef=0.01)
    sampler = EnvGroupSampler("CartPole-v1", 1, 2, seed=0)
    with pytest.raises(ValueError, match=r"LoopConfig.ent_coef=0.01: NoEntropyGrad gives no entropy"):
        GRPOLoop(cfg, NoEntropyGrad(sampler.obs_dim, sampler.num_actions), sampler, Accelerator(cpu=True))
    with pytest.raises(ValueError, match="ent_coef: must be >= 0"):
        LoopConfig(ent_coef=-0.1)


def test_weight_growth_is_the_norm_ratio_measured_from_a_floor():
    from grpo_seq.loop.diagnostics import weight_growth, weight_norm

    assert weight_norm([torch.ones(3, 4), torch.full((4,), 2.0)]) == pytest.approx(math.sqrt(12 + 16))
    # 1e30 squares past float32's range: the norm is taken again in float64, a number, not inf
    assert weight_norm([torch.ones(3), torch.full((2,), 1e30)]) == pytest.approx(math.sqrt(2) * 1e30)
    assert math.isinf(weight_norm([torch.tensor([1.0, float("inf")])]))
    assert weight_growth(10.0, 11.0, 100) == pytest.approx(1.1)
    # from zero, or near it, the growth is measured from an rms weight of 0.01: 0.01 * sqrt(100) = 0.1
    assert weight_growth(0.0, 1.0, 100) == pytest.approx(10.0) and weight_growth(1e-6, 1.0, 100) == pytest.approx(10.0)
    assert math.isnan(weight_growth(1.0, float("nan"), 100))


def test_a_diverging_update_stops_the_run_and_nothing_is_saved_after_it(tmp_path):
    from grpo_seq.errors import DivergedError, NonFiniteError

    trainer = make_trainer(tmp_path, learning_rate=1e30, advantage="outcome")
    with pytest.raises(DivergedError, match=r"diverged at step 1: the weights' norm grew .*-fold in one optimizer step"
                                            r".*lower --learning_rate \(now 1e\+30\)") as caught:
        trainer.step()
    assert isinstance(caught.value, NonFiniteError)  # the command line's exit 1, as for NaN
    assert trainer.diverged_at == 1
    with pytest.raises(DivergedError, match="not saving .*policy: the policy's weights diverged at step 1"):
        trainer.save()
    with pytest.raises(DivergedError, match="diverged at step 1"):
        trainer.save_checkpoint()
    assert not (tmp_path / "policy").exists() and not (tmp_path / "checkpoints").exists()


def test_a_policy_starting_at_zero_is_not_called_diverged():
    # Measured from zero, any first step would be an infinite growth: the floor lets it move.
    trainer = make_trainer(learning_rate=0.1, advantage="outcome")
    with torch.no_grad():
        for p in trainer.policy.parameters():
            p.zero_()
    for _ in range(3):
        trainer.step()
    assert trainer.diverged_at is None and any(bool(p.abs().sum() > 0) for p in trainer.policy.parameters())


def test_divergence_factor_is_checked_and_0_turns_the_check_off():
    with pytest.raises(ValueError, match="divergence_factor: must be > 1, or 0 to turn the check off"):
        LoopConfig(divergence_factor=1.0)
    trainer = make_trainer(learning_rate=1e30, divergence_factor=0)
    trainer.step()
    assert trainer.diverged_at is None
