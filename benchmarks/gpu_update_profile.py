"""Where grpo-seq's forward/backward pass over a GRPO batch spends its GPU time, beside the plain
``transformers`` pass TRL makes, on the same random-weight model and batch.

    python benchmarks/gpu_update_profile.py --tokenizer TOK --out result.json

The batch is ``gpu_step.py``'s: 8 prompts x G = 8, every completion 512 tokens, bf16 autocast
over float32 weights. Arms, each timed over --repeats passes after a warm-up pass (forward,
a sum of the log-probs, backward), with the GPU synchronised:

- ``shared``: :class:`grpo_seq.CausalLMPolicy` as the trainer uses it (each prompt run once,
  the fused head);
- ``full``: the same policy with ``share_prompt=False`` (one pass over prompt + completion);
- ``plain``: the model's own forward over prompt + completion, its logits' log-softmax and gather
  (what TRL computes).

Recorded per arm: the median seconds and peak GPU memory of a pass, and the 15 operators that
took most GPU time (torch.profiler, one pass).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_step  # noqa: E402
import record  # noqa: E402


def batch_for(tokenizer: Path, prompts: int, G: int, length: int, vocab: int, device: str):
    """A GRPO batch: ``prompts`` distinct left-padded prompts of various lengths, G rows each,
    completions of ``length`` random tokens."""
    import torch

    from grpo_seq import RolloutBatch

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(60, 140, (prompts,), generator=g)
    P = int(lengths.max())
    ids = torch.randint(10, vocab, (prompts, P), generator=g)
    pm = (torch.arange(P)[None] >= P - lengths[:, None]).long()
    ids = ids * pm
    B = prompts * G
    return RolloutBatch(
        context=ids.repeat_interleave(G, 0).to(device), prompt_mask=pm.repeat_interleave(G, 0).to(device),
        tokens=torch.randint(10, vocab, (B, length), generator=g).to(device),
        mask=torch.ones(B, length, dtype=torch.bool, device=device),
        group=torch.arange(prompts).repeat_interleave(G).to(device), num_generations=G,
        rewards=torch.zeros(B, device=device))


def plain_pass(model, batch):
    """TRL's computation: the model's logits over prompt + completion, log-softmax, gather."""
    import torch

    ids = torch.cat([batch.context, batch.tokens], 1)
    am = torch.cat([batch.prompt_mask, batch.mask.long()], 1)
    T = batch.tokens.shape[1]
    logits = model(input_ids=ids, attention_mask=am, logits_to_keep=T + 1).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, batch.tokens[..., None]).squeeze(-1), None


def measure(name: str, fn, model, repeats: int, device: str) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    def one() -> float:
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize() if device == "cuda" else None
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16):
            logp, _ = fn()
        logp.float().sum().backward()
        torch.cuda.synchronize() if device == "cuda" else None
        return time.perf_counter() - t0

    one()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = [one() for _ in range(repeats)]
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        one()
    key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key), reverse=True)[:15]
    top = [{"op": e.key, "ms": getattr(e, key) / 1e3, "calls": e.count} for e in events]
    print(f"{name}: {statistics.median(seconds):.3f} s a pass, peak {peak or 0:.1f} GiB", flush=True)
    for t in top[:8]:
        print(f"    {t['ms']:9.1f} ms  {t['calls']:6d}x  {t['op'][:80]}")
    return {"seconds": statistics.median(seconds), "all_seconds": seconds, "peak_gpu_gib": peak, "top_ops": top}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", type=Path, required=True, help="SmolLM2's config.json and tokenizer files.")
    ap.add_argument("--models", nargs="+", default=["qwen2-0.5b"], choices=["smollm2-135m", "qwen2-0.5b"])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--num_generations", type=int, default=8)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a check of this script")
    ap.add_argument("--out", type=Path, default=record.default_out("gpu_update_profile"))
    a = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from grpo_seq import CausalLMPolicy

    result = {"meta": record.meta(), "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
              "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            folder, _ = gpu_step.random_model(name, a.tokenizer, Path(tmp))
            model = AutoModelForCausalLM.from_pretrained(folder).to(a.device).train()
            batch = batch_for(a.tokenizer, a.prompts, a.num_generations, a.length, model.config.vocab_size, a.device)
            shared, full = CausalLMPolicy(model), CausalLMPolicy(model, share_prompt=False)
            arms = {"shared": lambda: shared(batch, with_entropy=False), "full": lambda: full(batch, with_entropy=False),
                    "plain": lambda: plain_pass(model, batch)}
            result["models"][name] = {arm: measure(f"{name} {arm}", fn, model, a.repeats, a.device)
                                      for arm, fn in arms.items()}
            record.prepare(a.out).write_text(json.dumps(result, indent=2))
            del model, shared, full
            if a.device == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
