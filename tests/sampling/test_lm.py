"""Language-model GRPO on a tiny Llama with a character tokenizer (built locally, no network)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from grpo_seq import CausalLMPolicy, LoopConfig, GRPOLoop, LMGroupSampler, RolloutBatch
from grpo_seq.math.objective import grpo_loss
from grpo_seq.sampling import completion_mask
from tiny_lm import chat_rows, make_sampler, make_tiny_lm

EOS = 4  # <|im_end|> in tiny_lm's vocabulary
PAD = 0


def hand_batch(tokenizer) -> RolloutBatch:
    """Two prompts of different lengths (so one is left-padded), completions ending at EOS or cut off."""
    enc = tokenizer(["ab", "abcde"], return_tensors="pt", padding=True, add_special_tokens=False)
    tokens = torch.tensor([[10, 11, EOS, PAD, PAD], [12, 13, 14, 15, 16]])
    mask, _ = completion_mask(tokens, [EOS])
    return RolloutBatch(
        context=enc["input_ids"], tokens=tokens, mask=mask, group=torch.tensor([0, 0]), num_generations=2,
        rewards=torch.zeros(2), prompt_mask=enc["attention_mask"],
    )


# -- masks --------------------------------------------------------------------------------------


def test_completion_mask_ends_at_first_eos_and_flags_truncation():
    tokens = torch.tensor([
        [7, 8, EOS, 9, EOS],  # stops at index 2; the later tokens never count
        [7, 8, 9, 10, 11],  # no EOS: cut off by the length limit
        [EOS, 1, 2, 3, 4],  # stops at once: only the EOS counts
    ])
    mask, truncated = completion_mask(tokens, [EOS])
    assert mask.tolist() == [
        [True, True, True, False, False],
        [True, True, True, True, True],
        [True, False, False, False, False],
    ]
    assert truncated.tolist() == [False, True, False]


def test_scores_ignore_prompt_padding_and_post_eos_tokens():
    model, tok = make_tiny_lm()
    policy = CausalLMPolicy(model, tok)
    batch = hand_batch(tok)
    assert batch.prompt_mask[0].tolist() == [0, 0, 0, 1, 1]  # "ab" is left-padded
    logp, _ = policy(batch)

    # Whatever sits under the masks (pad ids in the prompt, tokens after EOS) changes nothing.
    other = copy.copy(batch)
    other.context = batch.context.clone()
    other.context[0, :3] = 50
    other.tokens = batch.tokens.clone()
    other.tokens[0, 3:] = 60
    logp2, _ = policy(other)
    assert torch.equal(logp[batch.mask], logp2[batch.mask])
    adv = torch.tensor([[1.0] * 5, [-1.0] * 5])
    loss1, _ = grpo_loss(logp, logp.detach(), adv, batch.mask, eps_low=0.2)
    loss2, _ = grpo_loss(logp2, logp2.detach(), adv, batch.mask, eps_low=0.2)
    assert loss1.item() == loss2.item()

    # The left-padded row scores exactly as the same prompt alone, unpadded.
    single = tok(["ab"], return_tensors="pt", add_special_tokens=False)
    ids = torch.cat([single["input_ids"], batch.tokens[:1, :3]], 1)
    ref = torch.log_softmax(model(ids).logits[0, 1:-1].float(), -1).gather(-1, ids[0, 2:, None])[:, 0]
    torch.testing.assert_close(logp[0, :3], ref, atol=1e-5, rtol=0)


def test_scores_match_the_sampling_distribution():
    """Log-probs of the trainer's forward equal those generate() sampled from (left padding included)."""
    model, tok = make_tiny_lm()
    policy = CausalLMPolicy(model, tok)
    enc = tok(["hi", "a longer prompt"], return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(0)
    out = model.generate(**enc, max_new_tokens=6, do_sample=True, top_k=0, output_scores=True,
                         return_dict_in_generate=True, pad_token_id=PAD, eos_token_id=[EOS])
    gen = out.sequences[:, enc["input_ids"].shape[1]:]
    mask, _ = completion_mask(gen, [EOS])
    sampled = torch.stack(out.scores, 1).log_softmax(-1).gather(-1, gen[..., None])[..., 0]
    batch = RolloutBatch(context=enc["input_ids"], tokens=gen, mask=mask, group=torch.tensor([0, 0]), num_generations=2,
                         rewards=torch.zeros(2), prompt_mask=enc["attention_mask"])
    logp, _ = policy(batch)
    torch.testing.assert_close(logp[mask], sampled[mask], atol=1e-5, rtol=0)


def test_prompt_shared_scoring_equals_whole_sequences():
    """Each distinct prompt run once, its G completions attending to it: same log-probs, same gradients."""
    model, tok = make_tiny_lm()
    shared, whole = CausalLMPolicy(model, tok), CausalLMPolicy(model, tok, share_prompt=False)
    torch.manual_seed(2)
    batch = make_sampler(tok, max_completion_length=8).sample(shared)  # 2 prompts of different lengths x 4
    assert batch.prompt_mask.sum(-1).unique().numel() == 2  # so one of them is left-padded
    batch.advantages = torch.randn(batch.batch_size, 1).expand_as(batch.mask).clone()

    def logp_and_grads(policy, rows):
        model.zero_grad()
        sub = batch.select(rows)
        logp, _ = policy(sub)
        loss, _ = grpo_loss(logp, logp.detach(), sub.advantages, sub.mask, eps_low=0.2)
        loss.backward()
        return logp[sub.mask], [p.grad.clone() for p in model.parameters()]

    calls = count_forwards(model.model)  # the decoder body: the policy applies the LM head itself
    # All 8 rows (2 prompt passes), and rows 2-6 (part of each group, shuffled order).
    for rows in (torch.arange(8), torch.tensor([6, 2, 5, 3, 4])):
        calls["grad"] = 0
        logp_s, grads_s = logp_and_grads(shared, rows)
        assert calls["grad"] == 2  # one pass over the distinct prompts, one over the completions
        logp_w, grads_w = logp_and_grads(whole, rows)
        torch.testing.assert_close(logp_s, logp_w, atol=1e-5, rtol=0)
        for s_, w_ in zip(grads_s, grads_w):
            torch.testing.assert_close(s_, w_, atol=1e-6, rtol=1e-4)


def test_prompt_shared_generation_draws_the_same_samples():
    model, tok = make_tiny_lm()
    enc = tok(["hi", "a longer prompt"], return_tensors="pt", padding=True, add_special_tokens=False)
    kw = dict(max_new_tokens=8, num_return_sequences=3, pad_token_id=PAD, eos_token_id=[EOS])
    outs = []
    for share in (True, False):
        torch.manual_seed(0)
        outs.append(CausalLMPolicy(model, tok, share_prompt=share).generate(
            enc["input_ids"], enc["attention_mask"], do_sample=True, top_k=0, **kw))
    assert outs[0].shape[0] == 6 and torch.equal(outs[0], outs[1])
    assert len({tuple(r) for r in outs[0][:3, -8:].tolist()}) > 1  # G different samples of one prompt


def test_generation_under_autocast_uses_a_16bit_copy_that_follows_updates():
    model, tok = make_tiny_lm()
    policy = CausalLMPolicy(model, tok)
    enc = tok(["hi"], return_tensors="pt", add_special_tokens=False)
    kw = dict(max_new_tokens=3, num_return_sequences=2, do_sample=True, pad_token_id=PAD, eos_token_id=[EOS])
    policy.generate(enc["input_ids"], enc["attention_mask"], **kw)
    assert policy._cast is None  # no autocast: the fp32 model itself samples
    with torch.autocast("cpu", dtype=torch.bfloat16):
        policy.generate(enc["input_ids"], enc["attention_mask"], **kw)
        cast = policy._cast[0]
        assert {p.dtype for p in cast.parameters()} == {torch.bfloat16}
        # A fused AdamW step, as the trainer takes one (in place, by a kernel that bumps no version counter).
        model.model.layers[0].mlp.up_proj.weight.grad = torch.ones_like(model.model.layers[0].mlp.up_proj.weight)
        torch.optim.AdamW([model.model.layers[0].mlp.up_proj.weight], lr=0.5, fused=True).step()
        policy.generate(enc["input_ids"], enc["attention_mask"], **kw)
    assert policy._cast[0] is cast  # refreshed in place, not rebuilt
    for c, p in zip(cast.parameters(), model.parameters()):
        assert torch.equal(c, p.detach().to(torch.bfloat16))


# -- the sampler --------------------------------------------------------------------------------


def test_sampler_lays_out_groups_with_their_prompt_and_columns():
    model, tok = make_tiny_lm()
    torch.manual_seed(0)
    batch = make_sampler(tok).sample(CausalLMPolicy(model, tok))
    G = 4
    assert batch.tokens.shape[0] == 8 and batch.group.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    for g in range(2):
        rows = slice(g * G, (g + 1) * G)
        assert (batch.context[rows] == batch.context[g * G]).all()
        assert len({str(p) for p in batch.text.prompts[rows]}) == 1
        assert len(set(batch.text.columns["answer"][rows])) == 1
    assert batch.text.prompts[0] != batch.text.prompts[4]
    # Conversational prompts give conversational completions (what TRL-style reward functions expect).
    assert batch.text.completions[0] == [{"role": "assistant", "content": batch.text.completion_texts[0]}]
    # After the mask, only padding; a truncated row has no EOS at all.
    assert (batch.tokens[~batch.mask] == PAD).all()
    for row, m, cut in zip(batch.tokens, batch.mask, batch.truncated):
        assert (row[m] == EOS).any().item() != cut.item()
    assert batch.text.completion_ids[0] == batch.tokens[0][batch.mask[0]].tolist()


def test_sampler_shares_prompts_out_across_processes_and_epochs():
    _, tok = make_tiny_lm()
    rows = chat_rows(6)
    a = make_sampler(tok, rows, num_groups=1, process_index=0, num_processes=2, seed=3)
    b = make_sampler(tok, rows, num_groups=1, process_index=1, num_processes=2, seed=3)
    seen_a = [i for _ in range(3) for i in a._next_indices()]
    seen_b = [i for _ in range(3) for i in b._next_indices()]
    # One epoch of 6 prompts over 3 steps x 2 processes: each prompt exactly once, no overlap.
    assert sorted(seen_a + seen_b) == list(range(6))
    # The next epoch is a fresh order of the same prompts.
    again = [i for _ in range(3) for i in a._next_indices()] + [i for _ in range(3) for i in b._next_indices()]
    assert sorted(again) == list(range(6)) and a.epoch == 2


def test_sampler_without_shuffling_visits_prompts_in_dataset_order():
    _, tok = make_tiny_lm()
    a = make_sampler(tok, chat_rows(5), num_groups=2, shuffle=False)
    # Steps of 2 over 5 prompts: in file order, the next epoch starting over after the last.
    assert [a._next_indices() for _ in range(3)] == [[0, 1], [2, 3], [4, 0]]


def test_sampler_names_the_bad_input():
    _, tok = make_tiny_lm()
    with pytest.raises(ValueError, match="no 'prompt' column"):
        LMGroupSampler(tok, [{"question": "q"}], num_groups=1, num_generations=2)
    with pytest.raises(ValueError, match="num_generations"):
        LMGroupSampler(tok, chat_rows(), num_groups=1, num_generations=1)
    model, _ = make_tiny_lm()
    with pytest.raises(ValueError, match="row 1: the prompt is 40 tokens.* exceeds the model's context of 32"):
        make_sampler(tok, [{"prompt": "x" * 40}], num_groups=1, max_context_length=32)  # before any step
    s = make_sampler(tok, [{"prompt": "  "}], num_groups=1)
    with pytest.raises(ValueError, match="empty prompt"):
        s.sample(CausalLMPolicy(model, tok))


# -- the trainer ----------------------------------------------------------------------------------


def count_forwards(*policies) -> dict:
    """Scoring passes (policy forwards; generation is not one), with and without gradients."""
    calls = {"grad": 0, "no_grad": 0}

    def hook(*_):
        calls["grad" if torch.is_grad_enabled() else "no_grad"] += 1

    for p in policies:
        if p is not None:
            p.register_forward_hook(hook)
    return calls


def reward_sevens(batch: RolloutBatch) -> RolloutBatch:
    """The toy task: the share of a completion's characters that are '7'."""
    texts = batch.text.completion_texts
    batch.rewards = torch.tensor([t.count("7") / max(1, len(t)) for t in texts])
    return batch


def reward_by_rank(batch: RolloutBatch) -> RolloutBatch:
    """Member i of every group earns i: every group has spread, so every step has a gradient."""
    batch.rewards = (torch.arange(batch.batch_size) % batch.num_generations).float()
    return batch


def test_one_step_with_reference_has_finite_loss_and_zero_kl():
    model, tok = make_tiny_lm()
    cfg = LoopConfig(num_generations=4, num_groups=2, beta=0.04, micro_batch_size=3, learning_rate=1e-2)
    trainer = GRPOLoop(cfg, CausalLMPolicy(model, tok), make_sampler(tok), score_fn=reward_by_rank)
    calls = count_forwards(trainer.policy, trainer.ref_policy)
    m = trainer.step()
    assert math.isfinite(m["loss/policy"]) and m["loss/grad_norm"] > 0
    # The reference is a frozen copy of the starting policy: at the first step they agree exactly.
    assert m["policy/kl"] == 0.0
    # mu = 1: no pass for old log-probs; 8 outputs in micro-batches of 3: 3 reference passes, 3 trained.
    assert calls == {"grad": 3, "no_grad": 3}
    assert trainer.last_batch.old_logp is None
    m2 = trainer.step()
    assert m2["policy/kl"] > 0  # the policy moved away from the reference


def test_no_reference_with_beta_zero_and_old_logprobs_only_for_several_updates():
    model, tok = make_tiny_lm()
    cfg = LoopConfig(num_generations=4, num_groups=2, beta=0.0, learning_rate=1e-2)
    trainer = GRPOLoop(cfg, CausalLMPolicy(model, tok), make_sampler(tok), score_fn=reward_by_rank)
    calls = count_forwards(trainer.policy, trainer.ref_policy)
    trainer.step()
    assert trainer.ref_policy is None and calls == {"grad": 1, "no_grad": 0}

    model, tok = make_tiny_lm()
    cfg = LoopConfig(num_generations=4, num_groups=2, beta=0.0, mu=2, learning_rate=1e-2)
    trainer = GRPOLoop(cfg, CausalLMPolicy(model, tok), make_sampler(tok), score_fn=reward_by_rank)
    calls = count_forwards(trainer.policy, trainer.ref_policy)
    trainer.step()
    assert calls == {"grad": 2, "no_grad": 1} and trainer.last_batch.old_logp is not None


def test_groups_with_equal_rewards_skip_the_forward_and_backward():
    # The tiny model writes no '7': every group's rewards are 0, every advantage is 0, and with
    # beta = 0 there is nothing to compute; the optimizer still steps.
    for skip, grad_calls in ((True, 0), (False, 1)):
        model, tok = make_tiny_lm()
        cfg = LoopConfig(num_generations=4, num_groups=2, beta=0.0, skip_zero_advantage=skip)
        trainer = GRPOLoop(cfg, CausalLMPolicy(model, tok), make_sampler(tok), score_fn=reward_sevens)
        calls = count_forwards(trainer.policy, trainer.ref_policy)
        m = trainer.step()
        assert m["reward/zero_std_groups"] == 1.0
        assert calls == {"grad": grad_calls, "no_grad": 0}
        assert m["perf/trained_fraction"] == (0.0 if skip else 1.0)
        assert trainer.optimizer.state_dict()["state"][0]["step"] == 1


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_micro_batches_accumulate_the_whole_batch_gradient(loss_type):
    model, tok = make_tiny_lm()
    policy = CausalLMPolicy(model, tok)
    torch.manual_seed(1)
    batch = make_sampler(tok, max_completion_length=8).sample(policy)
    batch.mask[1, 3:] = False  # outputs of different lengths
    batch.mask[5, 1:] = False
    batch.advantages = torch.randn(batch.batch_size, 1).expand_as(batch.mask).clone()
    old = policy(batch)[0].detach() + 0.05 * torch.randn(batch.mask.shape)  # ratios off 1: clipping can act

    def grads(chunks):
        model.zero_grad()
        for c in chunks:
            sub = batch.select(c)
            logp, _ = policy(sub)
            loss, _ = grpo_loss(logp, old[c], sub.advantages, sub.mask, eps_low=0.2, loss_type=loss_type,
                                max_len=batch.mask.shape[1], num_outputs=batch.batch_size,
                                num_tokens=batch.mask.sum())
            loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    whole = grads([torch.arange(8)])
    micro = grads(torch.arange(8).split(3))
    for w, m in zip(whole, micro):
        torch.testing.assert_close(m, w, atol=1e-6, rtol=1e-5)


def test_reward_rises_on_a_toy_task():
    """Reward: the share of '7' among a completion's characters (1 in ~100 at random)."""
    torch.manual_seed(0)
    model, tok = make_tiny_lm()
    cfg = LoopConfig(num_generations=4, num_groups=2, beta=0.0, learning_rate=3e-2)
    trainer = GRPOLoop(cfg, CausalLMPolicy(model, tok), make_sampler(tok, max_completion_length=8),
                          score_fn=reward_sevens)
    rewards = [trainer.step()["reward/mean"] for _ in range(25)]
    assert sum(rewards[:3]) / 3 < 0.1
    assert sum(rewards[-3:]) / 3 > 0.5, rewards


# -- LoRA -----------------------------------------------------------------------------------------


def test_lora_reference_is_the_base_model_without_a_copy(tmp_path):
    from peft import LoraConfig, get_peft_model

    from grpo_seq.io.models import load_model_and_tokenizer

    model, tok = make_tiny_lm()
    base = copy.deepcopy(model)
    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    policy = CausalLMPolicy(lora, tok)
    assert policy.has_adapters
    cfg = LoopConfig(num_generations=4, num_groups=2, beta=0.04, learning_rate=5e-2)
    trainer = GRPOLoop(cfg, policy, make_sampler(tok), score_fn=reward_by_rank)
    assert trainer.ref_policy is None  # no second model in memory
    first = trainer.step()
    assert first["policy/kl"] == 0.0  # LoRA's B starts at 0: adapters change nothing yet
    trainer.step()
    trainer.step()

    batch = trainer.last_batch
    with torch.no_grad():
        with policy.adapters_disabled():
            ref_logp, _ = policy(batch)
        logp, _ = policy(batch)
        base_logp, _ = CausalLMPolicy(base, tok)(batch)
    m = batch.mask
    torch.testing.assert_close(ref_logp[m], base_logp[m], atol=1e-6, rtol=0)
    assert (logp[m] - base_logp[m]).abs().max() > 1e-4  # the adapters did train

    # Saved merged (loads without peft) with the adapter beside it.
    trainer.save(tmp_path / "model", merged=True)
    assert (tmp_path / "model" / "adapter" / "adapter_config.json").is_file()
    merged, _ = load_model_and_tokenizer(str(tmp_path / "model"))
    with torch.no_grad():
        merged_logp, _ = CausalLMPolicy(merged, tok)(batch)
    torch.testing.assert_close(merged_logp[m], logp[m], atol=1e-5, rtol=0)


def test_lora_refuses_reference_resets():
    from peft import LoraConfig, get_peft_model

    model, tok = make_tiny_lm()
    lora = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    cfg = LoopConfig(num_generations=4, num_groups=2, beta=0.04, ref_sync_steps=5)
    with pytest.raises(ValueError, match="ref_sync_steps"):
        GRPOLoop(cfg, CausalLMPolicy(lora, tok), make_sampler(tok), score_fn=reward_sevens)


def test_a_listening_sampler_says_what_it_is_doing_token_by_token():
    model, tok = make_tiny_lm()
    torch.manual_seed(0)
    sampler, heard = make_sampler(tok), []
    quiet = copy.deepcopy(sampler)
    sampler.status = heard.append
    batch = sampler.sample(CausalLMPolicy(model, tok))
    steps = batch.tokens.shape[1]  # positions generated before every row ended or the limit
    assert heard == [f"sampling 8 completions: token {t} of at most 10" for t in range(1, steps + 1)] + \
        ["scoring and updating"]
    torch.manual_seed(0)  # listening changes nothing in the samples
    assert torch.equal(quiet.sample(CausalLMPolicy(model, tok)).tokens, batch.tokens)
