"""Sampling speed: ``model.generate`` (through ``CausalLMPolicy``) against ``grpo_seq.generation``.

Both run the same prompts (chat-rendered GSM8K questions), G completions each, interleaved
(A B A B ...) so that background load hits both alike; medians are reported. By default EOS is
replaced with a token id that is practically never drawn so that every call decodes exactly
``--max-new-tokens`` tokens (``--real-eos`` keeps the tokenizer's EOS: then ms/token is the
fair figure).

    python benchmarks/generation_speed.py --precision fp32 bf16 --repeats 3
    python benchmarks/generation_speed.py --precision fp32 --methods ours ours-mkl --repeats 3

``ours-mkl`` is ``ours`` with the float32 weight products left to ``F.linear`` (MKL) instead of
oneDNN on packed weights (``grpo_seq.generation.few_rows_product``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

import torch

from grpo_seq import CausalLMPolicy, generation

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # recipes/gsm8k_tiny.py's

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path.home() / ".cache/grpo_seq/models"  # the plain checkpoint lm_vs_trl.py also uses

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)


def load(model: str):
    """The model, via a plain safetensors copy of the default GGUF one (~2 s to load instead of ~20 s)."""
    from lm_vs_trl import plain_checkpoint  # this folder's sibling script

    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = plain_checkpoint(None if model == DEFAULT_MODEL else model, CACHE)
    return AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


@contextlib.contextmanager
def without_onednn():
    """few_rows_product falls back to F.linear, as where this torch build lacks packed oneDNN."""
    saved = generation.decode_step._onednn_linear
    generation.decode_step._onednn_linear = lambda: False
    try:
        yield
    finally:
        generation.decode_step._onednn_linear = saved


def prompts(tokenizer, n: int, data: str) -> dict[str, torch.Tensor]:
    rows = [json.loads(line) for line, _ in zip(open(data), range(n))]
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": r["question"]}], tokenize=False,
                                      add_generation_prompt=True)
        for r in rows
    ]
    return tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/gsm8k/train.jsonl"))
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group-size", "-G", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--methods", nargs="+", default=["hf", "ours"], choices=["hf", "ours", "ours-mkl", "generic"],
                    help="hf: model.generate; ours: grpo_seq.generation; ours-mkl: ours with float32 products "
                         "through F.linear, not oneDNN on packed weights; generic: ours through the model's forward")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--real-eos", action="store_true", help="stop at the tokenizer's EOS (variable lengths)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", type=Path, default=record.default_out("generation_speed"),
                    help="JSON of the medians and the meta block (default: %(default)s; '' for none)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tok = load(args.model)
    enc = prompts(tok, args.prompts, args.data)
    eos = [tok.eos_token_id] if args.real_eos else [model.config.vocab_size - 1]
    policies = {m: CausalLMPolicy(model, tok, fast_generation=(m != "hf")) for m in args.methods}
    kwargs = dict(max_new_tokens=args.max_new_tokens, num_return_sequences=args.group_size, pad_token_id=tok.pad_token_id,
                  eos_token_id=eos, do_sample=True, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k)
    print(f"prompt tokens {enc['attention_mask'].sum(-1).tolist()} (padded to {enc['input_ids'].shape[1]}), "
          f"rows {args.prompts * args.group_size}, threads {torch.get_num_threads()}")
    results = {}
    for precision in args.precision:
        ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" else contextlib.nullcontext
        times: dict[str, list[float]] = {m: [] for m in args.methods}
        tokens: dict[str, list[int]] = {m: [] for m in args.methods}
        for rep in range(args.repeats + 1):  # the first round warms up and is not counted
            for m in args.methods:
                torch.manual_seed(rep)
                with ctx():
                    t0 = time.perf_counter()
                    extra = {"fast_step": False} if m == "generic" else {}
                    with without_onednn() if m == "ours-mkl" else contextlib.nullcontext():
                        out = policies[m].generate(enc["input_ids"], enc["attention_mask"], **kwargs, **extra)
                    dt = time.perf_counter() - t0
                steps = out.shape[1] - enc["input_ids"].shape[1]
                if rep:
                    times[m].append(dt)
                    tokens[m].append(steps)
                print(f"  {precision} {m:7s} rep {rep}: {dt:6.2f} s, {steps} steps, {1000 * dt / steps:6.1f} ms/step"
                      + ("" if rep else " (warm-up)"), flush=True)
        for m in args.methods:
            s = statistics.median(times[m])
            ms = statistics.median(1000 * t / n for t, n in zip(times[m], tokens[m]))
            results[(precision, m)] = (s, ms)
            print(f"{precision} {m:7s}: median {s:.2f} s per call, {ms:.1f} ms per step")
        if "hf" in args.methods and "ours" in args.methods:
            print(f"{precision} speed-up (ms/step): {results[(precision, 'hf')][1] / results[(precision, 'ours')][1]:.2f}x")
    if args.out.name:
        rows = [{"precision": p, "method": m, "seconds_per_call": s, "ms_per_token": ms} for (p, m), (s, ms) in results.items()]
        settings = {k: v for k, v in vars(args).items() if k != "out"}
        record.prepare(args.out).write_text(json.dumps({"meta": record.meta(), "settings": settings, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
