"""Calls that arrive together share one decode batch, and sharing changes no call's tokens'
log-probs: each is what the trainer scores for it alone (a tiny Llama, float32)."""

from __future__ import annotations

import threading

import torch
from tiny_lm import make_tiny_lm

from grpo_seq.agents.batching import DecodeBatcher, Job, generate_rows
from grpo_seq.agents.trajectory import Call, as_episode, episodes_batch
from grpo_seq.policies import CausalLMPolicy

SAMPLING = {"do_sample": True, "temperature": 0.7, "top_p": 1.0, "top_k": 0}


def test_queued_calls_are_one_batch_each_cut_at_its_own_limit_and_scored_as_sampled():
    torch.manual_seed(0)
    model, tok = make_tiny_lm()
    policy = CausalLMPolicy(model, tok)
    short = Job(tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)["input_ids"],
                n=2, max_new=3, sampling=SAMPLING)
    long = Job(tok.apply_chat_template([{"role": "user", "content": "a longer question, padded beside it"}],
                                       add_generation_prompt=True)["input_ids"], n=2, max_new=9, sampling=SAMPLING)
    calls = []

    def generate(jobs: list[Job]) -> None:
        calls.append(len(jobs))
        for job, choices in zip(jobs, generate_rows(policy, jobs, tok.pad_token_id, [tok.eos_token_id], None)):
            job.result = choices

    batcher = DecodeBatcher(threading.Lock(), generate)
    batcher.queue(long)  # arrived while another call held the lock
    batcher.run(short)
    assert calls == [2] and (batcher.batches, batcher.jobs) == (1, 2) and long.done
    assert all(len(ids) <= 3 for ids, _, _ in short.result) and all(len(ids) <= 9 for ids, _, _ in long.result)
    assert max(len(ids) for ids, _, _ in long.result) > 3  # the long call decoded past the short one's limit
    episodes = [as_episode([Call(job.prompt, ids, lps, [], {}, ended)], 0.0)
                for job in (short, long) for ids, lps, ended in job.result]
    batch = episodes_batch(episodes, 2, tok, temperature=0.7)
    with torch.no_grad():
        logp, _ = policy(batch, with_entropy=False)
    assert torch.allclose(logp[batch.mask], batch.sampler_logp[batch.mask], atol=1e-5, rtol=0)


def _fake_generate(sizes: list[int]):
    def generate(jobs: list[Job]) -> None:
        sizes.append(len(jobs))
        for job in jobs:
            job.result = job.prompt

    return generate


def test_a_call_waits_for_the_other_open_rollouts_calls_and_they_share_its_batch():
    from grpo_seq.agents.trajectory import Trajectory

    sizes: list[int] = []
    arrived = threading.Event()
    batcher = DecodeBatcher(threading.Lock(), _fake_generate(sizes), open_rollouts=lambda: 3, quiet=30.0)
    jobs = [Job([k], 1, 1, SAMPLING, trajectory=Trajectory(f"r{k}")) for k in range(3)]
    first = threading.Thread(target=lambda: (arrived.set(), batcher.run(jobs[0])))
    first.start()
    arrived.wait()
    others = [threading.Thread(target=batcher.run, args=(job,)) for job in jobs[1:]]
    for t in others:
        t.start()
    for t in [first, *others]:
        t.join(timeout=60)
    # the lock holder held on (quiet is long) until all three open rollouts had called: one batch
    assert sizes == [3] and [job.result for job in jobs] == [[0], [1], [2]]


def test_with_no_other_rollout_calling_the_call_goes_alone_after_the_quiet_time():
    from grpo_seq.agents.trajectory import Trajectory

    sizes: list[int] = []
    batcher = DecodeBatcher(threading.Lock(), _fake_generate(sizes), open_rollouts=lambda: 2, quiet=0.0)
    assert batcher.run(Job([7], 1, 1, SAMPLING, trajectory=Trajectory("r0"))) == [7] and sizes == [1]
    alone = DecodeBatcher(threading.Lock(), _fake_generate(sizes))  # no rollouts open: no wait at all
    assert alone.run(Job([8], 1, 1, SAMPLING)) == [8] and sizes == [1, 1]
