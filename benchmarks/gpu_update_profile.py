"""Where grpo-seq's forward/backward pass over a GRPO batch spends its GPU time, beside the plain
``transformers`` pass TRL makes, on the same random-weight model and batch.

    python benchmarks/gpu_update_profile.py --tokenizer TOK --out result.json

The batch is ``gpu_step.py``'s: 8 prompts x G = 8, every completion 512 tokens, bf16 autocast
over float32 weights. Arms, each timed over --repeats passes after a warm-up pass (forward,
a sum of the log-probs, backward), with the GPU synchronised. With ``--vary_prompts`` each pass
gets a batch of other prompt lengths, as a trainer's steps do (the attention kernels' plans are
then not reused across passes):

- ``shared``: :class:`grpo_seq.CausalLMPolicy` as the trainer uses it (each prompt run once,
  the fused head);
- ``full``: the same policy with ``share_prompt=False`` (one pass over prompt + completion);
- ``plain``: the model's own forward over prompt + completion, its logits' log-softmax and gather
  (what TRL computes);
- ``shared_no_cudnn``: ``shared`` with scaled-dot-product attention kept off cuDNN's kernels
  (``torch.nn.attention.sdpa_kernel``), which build a plan per new shape;
- ``trainer``: whole steps of :class:`grpo_seq.GRPOLoop` (under accelerate's bf16 mixed precision,
  beta 0, one update, the batch in one pass, random rewards) on the same batches, handed over by a
  sampler that generates nothing: its update phase (``perf/backward_seconds`` plus
  ``perf/optimizer_seconds``) beside the bare pass.

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


def batch_for(prompts: int, G: int, length: int, vocab: int, device: str, seed: int = 0):
    """A GRPO batch: ``prompts`` distinct left-padded prompts of various lengths, G rows each,
    completions of ``length`` random tokens."""
    import torch

    from grpo_seq import RolloutBatch

    g = torch.Generator().manual_seed(seed)
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


def no_cudnn(policy, batch):
    """``policy(batch)`` with attention on flash, memory-efficient or plain kernels, not cuDNN's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        return policy(batch, with_entropy=False)


def measure(name: str, fn, model, batches: list, device: str) -> dict:
    """``fn(batch)`` forward and backward: a warm-up on ``batches[0]``, one timed pass per batch
    after it, one profiled pass on the last."""
    import torch

    def one(batch) -> float:
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize() if device == "cuda" else None
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16):
            logp, _ = fn(batch)
        logp.float().sum().backward()
        torch.cuda.synchronize() if device == "cuda" else None
        return time.perf_counter() - t0

    one(batches[0])
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = [one(b) for b in batches[1:]]
    return summarise(f"{name}: a pass", seconds, lambda: one(batches[-1]), device)


def summarise(name: str, seconds: list[float], run_once, device: str) -> dict:
    """The median of ``seconds``, the peak GPU memory since the last reset, and the 15 operators
    that took most time in one more run (``run_once``) under torch.profiler; printed and returned."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        run_once()
    key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key), reverse=True)[:15]
    top = [{"op": e.key, "ms": getattr(e, key) / 1e3, "calls": e.count} for e in events]
    print(f"{name}: {statistics.median(seconds):.3f} s, peak {peak or 0:.1f} GiB", flush=True)
    for t in top[:8]:
        print(f"    {t['ms']:9.1f} ms  {t['calls']:6d}x  {t['op'][:80]}")
    return {"seconds": statistics.median(seconds), "all_seconds": seconds, "peak_gpu_gib": peak, "top_ops": top}


class FixedBatches:
    """A sampler that hands over ready batches in turn (rewards drawn at random, so that every
    group has a signal): the trainer's step without generation."""

    def __init__(self, batches: list, prompts: int, G: int):
        import torch

        self.batches, self.num_groups, self.num_generations, self.k = batches, prompts, G, 0
        self.rng = torch.Generator().manual_seed(0)

    def sample(self, policy):
        import torch

        batch = self.batches[self.k % len(self.batches)]
        self.k += 1
        batch.rewards = torch.rand(batch.batch_size, generator=self.rng).to(batch.tokens.device)
        batch.advantages = None
        return batch


def trainer_steps(name: str, policy, batches: list, a: argparse.Namespace, folder: Path) -> dict:
    """Whole trainer steps on ``batches`` (the first warms up, the last is profiled): their update
    phase's seconds, and the peak GPU memory over the timed steps."""
    import torch
    from accelerate import Accelerator

    from grpo_seq import GRPOLoop, LoopConfig

    config = LoopConfig(num_groups=a.prompts, num_generations=a.num_generations, beta=0.0, mu=1, micro_batch_size=0,
                        skip_zero_advantage=False, skip_steps_without_signal=False, lr_schedule="constant",
                        output_dir=str(folder), save_steps=0, overwrite=True)
    acc = Accelerator(mixed_precision="bf16", cpu=a.device == "cpu")
    loop = GRPOLoop(config, policy, FixedBatches(batches, a.prompts, a.num_generations), accelerator=acc)
    update = lambda m: m["perf/backward_seconds"] + m["perf/optimizer_seconds"]  # noqa: E731
    loop.step()
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = [update(loop.step()) for _ in batches[1:]]
    return summarise(f"{name} trainer: an update", seconds, loop.step, a.device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", type=Path, required=True, help="SmolLM2's config.json and tokenizer files.")
    ap.add_argument("--models", nargs="+", default=["qwen2-0.5b"], choices=["smollm2-135m", "qwen2-0.5b"])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--num_generations", type=int, default=8)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--vary_prompts", action=argparse.BooleanOptionalAction, default=True,
                    help="Each pass a batch of other prompt lengths (--no-vary_prompts: the same batch every pass).")
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
            batches = [batch_for(a.prompts, a.num_generations, a.length, model.config.vocab_size, a.device,
                                 seed=k if a.vary_prompts else 0) for k in range(a.repeats + 1)]
            shared, full = CausalLMPolicy(model), CausalLMPolicy(model, share_prompt=False)
            arms = {"shared": lambda b: shared(b, with_entropy=False), "full": lambda b: full(b, with_entropy=False),
                    "plain": lambda b: plain_pass(model, b), "shared_no_cudnn": lambda b: no_cudnn(shared, b)}
            result["models"][name] = {arm: measure(f"{name} {arm}", fn, model, batches, a.device)
                                      for arm, fn in arms.items()}
            record.prepare(a.out).write_text(json.dumps(result, indent=2))
            result["models"][name]["trainer"] = trainer_steps(name, shared, batches, a, Path(tmp) / f"{name}_run")
            record.prepare(a.out).write_text(json.dumps(result, indent=2))
            del model, shared, full
            if a.device == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
