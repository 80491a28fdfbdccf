"""Does our sampling loop draw from the same distribution as transformers' `generate()`?

    python benchmarks/sampling_agreement.py --rounds 8

On the real model (SmolLM2-135M-Instruct, the plain checkpoint `lm_vs_trl.py` caches), for the
first two GSM8K train problems as chat prompts (one left-padded), G = 4 completions each:
1. the per-token log-probs our loop records while sampling, against a plain forward pass's
   `log_softmax(logits / T)` on the sampled sequences (largest difference);
2. --rounds rounds of 8 completions from each sampler (seeded alike, different draws): mean
   length, share cut at the length limit, mean token log-prob under `logits / T`, mean reward
   (correctness + format). Equal distributions give equal figures up to sampling noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_seq.generation import sample_tokens  # noqa: E402
from grpo_seq.io.prompt_data import chat_prompts, read_rows  # noqa: E402
from reward_fns.gsm8k import GSM8K_INSTRUCTION, GSM8K_SYSTEM_PROMPT, correctness_reward, format_reward  # noqa: E402

import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)


def score(model, seq: torch.Tensor, prompt_mask: torch.Tensor, P: int, eos: int, T: float):
    """Completion mask (up to and with the first EOS) and per-token log-probs under logits / T."""
    comp = seq[:, P:]
    is_eos = comp == eos
    cut = ~is_eos.any(-1)
    first = torch.where(cut, comp.shape[1] - 1, is_eos.int().argmax(-1))
    mask = torch.arange(comp.shape[1])[None] <= first[:, None]
    am = torch.cat([prompt_mask, mask.long()], 1)
    logits = model(input_ids=seq, attention_mask=am, position_ids=(am.cumsum(-1) - 1).clamp(min=0)).logits
    lp = (logits[:, P - 1:-1].float() / T).log_softmax(-1).gather(-1, comp[..., None]).squeeze(-1)
    return comp, mask, cut, lp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=Path.home() / ".cache/grpo_seq/models/HuggingFaceTB__SmolLM2-135M-Instruct")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/gsm8k/train.jsonl")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--max_new_tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=record.default_out("sampling_agreement"))
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(a.model)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(a.model).eval()
    rows = chat_prompts(read_rows(str(a.data)), system_prompt=GSM8K_SYSTEM_PROMPT, instruction=GSM8K_INSTRUCTION)
    rows = [rows[0], rows[1]]
    texts = [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    P, G, T, eos = enc["input_ids"].shape[1], 4, a.temperature, tok.eos_token_id
    prompt_mask = enc["attention_mask"].repeat_interleave(G, 0)
    answers = [r["answer"] for r in rows for _ in range(G)]
    kw = {"do_sample": True, "temperature": T, "top_k": 0, "top_p": 1.0, "eos_token_id": eos, "pad_token_id": eos,
          "max_new_tokens": a.max_new_tokens, "num_return_sequences": G}
    result: dict = {"meta": record.meta(), "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()}}

    with torch.no_grad():
        torch.manual_seed(0)
        seq, recorded = sample_tokens(model, enc["input_ids"], enc["attention_mask"], output_logprobs=True,
                                      **{**kw, "eos_token_id": [eos]})
        _, mask, _, lp = score(model, seq, prompt_mask, P, eos, T)
        result["max_abs_recorded_minus_forward_logprob"] = float((recorded - lp[:, : recorded.shape[1]])[mask].abs().max())
        print(f"recorded log-probs against a forward pass: largest difference {result['max_abs_recorded_minus_forward_logprob']:.2e}")

        for name in ("ours", "generate"):
            lengths, cut_flags, rewards, lp_sum, n_tok = [], [], [], 0.0, 0
            for r in range(a.rounds):
                torch.manual_seed(1000 + r)
                if name == "ours":
                    seq = sample_tokens(model, enc["input_ids"], enc["attention_mask"], **{**kw, "eos_token_id": [eos]})
                else:
                    seq = model.generate(**enc, **kw)
                comp, mask, cut, lp = score(model, seq, prompt_mask, P, eos, T)
                lengths += mask.sum(-1).tolist()
                cut_flags += cut.tolist()
                lp_sum += float((lp * mask).sum())
                n_tok += int(mask.sum())
                text = tok.batch_decode([c[m].tolist() for c, m in zip(comp, mask)], skip_special_tokens=True)
                comps = [[{"role": "assistant", "content": t}] for t in text]
                rewards += [x + y for x, y in zip(correctness_reward(None, comps, answer=answers),
                                                  format_reward(None, comps, answer=answers))]
            result[name] = {"completions": len(lengths), "mean_length": statistics.fmean(lengths),
                            "cut_at_limit": statistics.fmean(cut_flags), "mean_token_logprob": lp_sum / n_tok,
                            "mean_reward": statistics.fmean(rewards)}
            print(name, json.dumps(result[name]), flush=True)
    if a.out:
        record.prepare(a.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
