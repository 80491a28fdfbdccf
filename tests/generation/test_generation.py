"""The lean sampling loop (grpo_seq.generation) against transformers' generate, on tiny local models."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from grpo_seq import CausalLMPolicy, RolloutBatch
from grpo_seq.generation import cache
from grpo_seq.generation import _draw, _onednn_linear, decode_step, few_rows_product, process_logits, sample_tokens, unsupported_reason
from grpo_seq.sampling import completion_mask
from tiny_lm import make_tiny_lm

PAD = 0


def lively(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """Large random weights, so greedy paths vary token to token instead of repeating one token."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0, 0.3)
    return model


@pytest.fixture(scope="module")
def tiny():
    model, tok = make_tiny_lm(hidden=64)
    return lively(model), tok


def tiny_qwen2(tok) -> torch.nn.Module:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, pad_token_id=PAD, eos_token_id=tok.eos_token_id,
        tie_word_embeddings=False,
    )
    return lively(Qwen2ForCausalLM(config).eval())


def prompts(tok) -> dict[str, torch.Tensor]:
    """Two chat prompts of different lengths: the first is left-padded."""
    texts = ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
             "<|im_start|>user\nhello there, friend<|im_end|>\n<|im_start|>assistant\n"]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    assert enc["attention_mask"][0, 0] == 0 and enc["attention_mask"][1].all()
    return enc


def hf_greedy(model, enc, G: int, eos: list[int], n: int = 24) -> torch.Tensor:
    ids, am = enc["input_ids"].repeat_interleave(G, 0), enc["attention_mask"].repeat_interleave(G, 0)
    return model.generate(input_ids=ids, attention_mask=am, max_new_tokens=n, do_sample=False, pad_token_id=PAD,
                          eos_token_id=eos)


def ours(model, enc, G: int, eos: list[int], n: int = 24, **kw) -> torch.Tensor:
    kw = {"do_sample": False, **kw}
    return sample_tokens(model, enc["input_ids"], enc["attention_mask"], max_new_tokens=n, num_return_sequences=G,
                         pad_token_id=PAD, eos_token_id=eos, **kw)


@pytest.mark.parametrize("fast_step", [True, False])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_greedy_matches_generate_token_for_token(tiny, fast_step, arch):
    model, tok = tiny
    if arch == "qwen2":
        model = tiny_qwen2(tok)
    enc = prompts(tok)
    ref = hf_greedy(model, enc, G=3, eos=[tok.eos_token_id])
    got = ours(model, enc, G=3, eos=[tok.eos_token_id], fast_step=fast_step)
    assert got.shape == ref.shape
    assert torch.equal(got, ref)
    assert not torch.equal(got[0, -24:], got[3, -24:])  # the two prompts continue differently


@pytest.mark.parametrize("drop", [0, 1])
def test_rows_stop_at_their_first_eos_and_are_padded_after(tiny, drop):
    model, tok = tiny
    enc = prompts(tok)
    free = ours(model, enc, G=2, eos=[tok.eos_token_id])[:, enc["input_ids"].shape[1]:]
    # Make EOS tokens that row 0 and row 2 (the other prompt) emit mid-way: they end at
    # different steps, and one "EOS" id is a list of several.
    eos = [int(free[0, 3]), int(free[2, 6])]
    ref = hf_greedy(model, enc, G=2, eos=eos)
    got = ours(model, enc, G=2, eos=eos, min_rows_to_drop=drop)
    assert torch.equal(got, ref)
    new = got[:, enc["input_ids"].shape[1]:]
    mask, truncated = completion_mask(new, eos)
    assert not truncated.any()
    assert (new[~mask] == PAD).all()  # padded after the first EOS
    assert new.shape[1] == int(mask.sum(-1).max())  # stops once every row has ended


def test_dropping_finished_rows_changes_nothing_on_the_sampling_path(tiny):
    # Through process_logits and _draw with top_k=1: the draw is deterministic, so outputs with
    # and without dropping are comparable (with real sampling, dropping rows changes which
    # uniform each remaining row receives, so only the distribution would match).
    model, tok = tiny
    enc = prompts(tok)
    eos = [int(t) for t in ours(model, enc, G=2, eos=[])[:, enc["input_ids"].shape[1]:][:, 2]]
    a = ours(model, enc, G=4, eos=eos, n=30, do_sample=True, top_k=1, min_rows_to_drop=1)
    b = ours(model, enc, G=4, eos=eos, n=30, do_sample=True, top_k=1, min_rows_to_drop=0)
    assert torch.equal(a, b)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the step replayed as a CUDA graph)")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize(("arch", "ending"), [("llama", "two rows"), ("qwen2", "two rows"), ("llama", "all early"),
                                               ("llama", "all late")])
def test_the_static_step_decodes_what_generate_decodes(tiny, arch, ending, device):
    # Full-capacity attention with the unfilled tail masked, rows kept after their EOS: the same
    # greedy tokens as transformers' generate, the left-padded prompt included, and the output
    # ends where the last row ended, whether before or after the step asks whether all have
    # (every 16 tokens). On a GPU the step is a replayed CUDA graph.
    model, tok = tiny
    if arch == "qwen2":
        model = tiny_qwen2(tok)
    model = copy.deepcopy(model).to(device)  # the module's fixture stays on the CPU
    enc = {k: v.to(device) for k, v in prompts(tok).items()}
    n = 40
    free = ours(model, enc, G=2, eos=[], n=n, static_step=False)[:, enc["input_ids"].shape[1]:]
    eos = {"two rows": [int(free[0, 3]), int(free[2, 6])],  # the others run to the limit
           "all early": [int(t) for t in free[:, 2]], "all late": [int(t) for t in free[:, 20]]}[ending]
    ref = hf_greedy(model, enc, G=2, eos=eos, n=n)
    got = ours(model, enc, G=2, eos=eos, n=n, static_step=True)
    assert torch.equal(got, ref)
    if ending != "two rows":
        assert got.shape[1] - enc["input_ids"].shape[1] < n  # stopped before the limit


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_the_static_step_samples_what_the_loop_samples(tiny, device, monkeypatch):
    model, tok = tiny
    # New cache buffers hold NaN, as fresh memory may: the empty slots must not reach the logits.
    layer = cache._inplace_layer_class()
    empty = layer.lazy_initialization
    monkeypatch.setattr(layer, "lazy_initialization", lambda self, k, v: (empty(self, k, v), self.key_buf.fill_(float("nan")),
                                                                          self.value_buf.fill_(float("nan")))[0])
    model = copy.deepcopy(model).to(device)  # the module's fixture stays on the CPU
    enc = {k: v.to(device) for k, v in prompts(tok).items()}
    kw = {"do_sample": True, "temperature": 0.9, "top_p": 0.95, "n": 20, "output_logprobs": True}
    runs = [ours(model, enc, G=3, eos=[tok.eos_token_id], generator=torch.Generator(device).manual_seed(5),
                 static_step=static, min_rows_to_drop=0, **kw) for static in (False, True)]
    (a, lp_a), (b, lp_b) = runs
    assert torch.equal(a, b)
    torch.testing.assert_close(lp_a, lp_b, atol=1e-5, rtol=1e-5)
    assert not torch.equal(a[0], a[1])


def test_sampled_logprobs_match_the_policy_scores(tiny):
    model, tok = tiny
    enc = prompts(tok)
    G = 3
    torch.manual_seed(0)
    seqs, logprobs = ours(model, enc, G=G, eos=[tok.eos_token_id], n=16, do_sample=True, temperature=1.0,
                          output_logprobs=True)
    P = enc["input_ids"].shape[1]
    tokens = seqs[:, P:]
    mask, _ = completion_mask(tokens, [tok.eos_token_id])
    batch = RolloutBatch(
        context=enc["input_ids"].repeat_interleave(G, 0), tokens=tokens, mask=mask,
        group=torch.arange(2).repeat_interleave(G), num_generations=G, rewards=torch.zeros(2 * G),
        prompt_mask=enc["attention_mask"].repeat_interleave(G, 0),
    )
    with torch.no_grad():
        logp, _ = CausalLMPolicy(model, tok)(batch, with_entropy=False)
    # float32 rounding of two different kernels (a cached decode against one full pass): up to 1e-5
    # relative on this project's CPUs; a scoring fault (a shifted position, a padding token attended) is far larger.
    torch.testing.assert_close(logp[mask], logprobs[mask], atol=1e-5, rtol=1e-5)


def test_same_seed_same_samples(tiny):
    model, tok = tiny
    enc = prompts(tok)
    kw = {"do_sample": True, "temperature": 1.0, "n": 20}
    torch.manual_seed(3)
    a = ours(model, enc, G=4, eos=[tok.eos_token_id], **kw)
    torch.manual_seed(3)
    b = ours(model, enc, G=4, eos=[tok.eos_token_id], **kw)
    c = ours(model, enc, G=4, eos=[tok.eos_token_id], generator=torch.Generator().manual_seed(3), **kw)
    d = ours(model, enc, G=4, eos=[tok.eos_token_id], generator=torch.Generator().manual_seed(3), **kw)
    assert torch.equal(a, b) and torch.equal(c, d)
    assert not torch.equal(a[0], a[1])  # the G samples of a prompt differ


def test_top_k_1_and_tiny_top_p_are_greedy(tiny):
    model, tok = tiny
    enc = prompts(tok)
    greedy = ours(model, enc, G=3, eos=[tok.eos_token_id])
    for kw in ({"top_k": 1}, {"top_p": 1e-6}):
        torch.manual_seed(0)
        assert torch.equal(ours(model, enc, G=3, eos=[tok.eos_token_id], do_sample=True, temperature=1.5, **kw), greedy)


def test_process_logits_matches_transformers_warpers():
    torch.manual_seed(0)
    logits = torch.randn(5, 50) * 3
    for k, p in [(0, 0.9), (7, 1.0), (7, 0.5), (0, 1.0)]:
        want = logits / 0.7
        if k:
            want = TopKLogitsWarper(k)(None, want)
        if p < 1:
            want = TopPLogitsWarper(p)(None, want)
        got = process_logits(logits, temperature=0.7, top_k=k, top_p=p)
        assert torch.equal(torch.isinf(got), torch.isinf(want))
        torch.testing.assert_close(got[~torch.isinf(got)], want[~torch.isinf(want)])


def test_draw_follows_the_distribution_and_never_picks_a_removed_token():
    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0])
    scores = probs.log().expand(20000, -1)
    draws = _draw(scores, True, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=6).float() / len(draws)
    assert freq[probs == 0].sum() == 0
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)


def test_policy_generate_uses_the_loop_and_falls_back(tiny, monkeypatch):
    model, tok = tiny
    enc = prompts(tok)
    policy = CausalLMPolicy(model, tok)
    kw = {"max_new_tokens": 8, "pad_token_id": PAD, "eos_token_id": [tok.eos_token_id], "do_sample": True,
          "temperature": 0.7, "top_p": 1.0, "top_k": 0}
    assert unsupported_reason(model, kw) is None
    assert unsupported_reason(model, {**kw, "repetition_penalty": 1.1}) is not None
    calls = []
    real = type(model).generate
    monkeypatch.setattr(type(model), "generate", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    out = policy.generate(enc["input_ids"], enc["attention_mask"], num_return_sequences=4, **kw)
    assert out.shape[0] == 8 and not calls
    policy.generate(enc["input_ids"], enc["attention_mask"], num_return_sequences=4, repetition_penalty=1.1, **kw)
    assert calls


@pytest.mark.parametrize("rows", [1, 3, 8])
def test_few_rows_product_equals_the_linear_layer(rows):
    # The decoding step's products: float32 weights repacked for oneDNN where this torch has it.
    torch.manual_seed(0)
    layer = torch.nn.Linear(96, 160)
    x = torch.randn(rows, 96)
    expected = torch.nn.functional.linear(x.double(), layer.weight.double(), layer.bias.double())
    got = few_rows_product(layer, rows=8)(x)
    assert got.dtype == torch.float32 and got.shape == (rows, 160)
    # float32 sums of 96 products, in whatever order the kernel takes: a few ulps of |x| |w|
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-5)
    if _onednn_linear():  # the packed path really ran: it works on a copy, so zeroing the weight
        with torch.no_grad():  # after packing changes nothing (F.linear would now give the bias alone)
            product = few_rows_product(layer, rows=8)
            layer.weight.zero_()
            torch.testing.assert_close(product(x), got, rtol=0, atol=0)


def test_few_rows_product_keeps_f_linear_in_16_bit_and_under_autocast():
    torch.manual_seed(0)
    layer = torch.nn.Linear(32, 48)
    x = torch.randn(4, 32)
    half = torch.nn.Linear(32, 48).to(torch.bfloat16)
    assert torch.equal(few_rows_product(half)(x.bfloat16()), half(x.bfloat16()))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = few_rows_product(layer)(x)
        assert got.dtype == torch.bfloat16 and torch.equal(got, layer(x))


@pytest.mark.parametrize("why", ["untested torch version", "missing private op"])
def test_private_onednn_ops_are_used_only_on_tested_torch_versions(why, monkeypatch, caplog):
    # Outside the tested versions, or without the ops, the products fall back to F.linear (one log line).
    if why == "untested torch version":
        monkeypatch.setattr(decode_step, "TESTED_TORCH", ((0, 1), (0, 2)))
    else:
        monkeypatch.setattr(decode_step, "_PRIVATE_OPS", ("_no_such_op_xyz",))
    decode_step._onednn_linear.cache_clear()
    try:
        with caplog.at_level("INFO", logger=decode_step.__name__):
            assert not decode_step._onednn_linear()
        layer = torch.nn.Linear(8, 4)
        product = few_rows_product(layer)
        with torch.no_grad():
            layer.weight.zero_()  # F.linear reads the live weight: now the bias alone
            assert torch.equal(product(torch.ones(2, 8)), layer.bias.expand(2, 4))
        assert [r.getMessage() for r in caplog.records if "F.linear" in r.getMessage()] != []
    finally:
        decode_step._onednn_linear.cache_clear()
