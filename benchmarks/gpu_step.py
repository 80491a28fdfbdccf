"""One GRPO step on one GPU: grpo-seq against TRL's GRPOTrainer, the same model, prompts, G and lengths.

    python benchmarks/gpu_step.py --tokenizer DIR --data prompts.jsonl --out benchmarks/results/gpu_step/result.json

Needs a CUDA GPU, TRL and datasets. On a machine without them, carry their wheels (for its
Python: trl, datasets, dill, multiprocess, gymnasium, farama-notifications) in a folder, with
SmolLM2's config and tokenizer files (``--tokenizer``) and the first 24 GSM8K rows (``--data``), and
install them first:

    pip install --no-index --no-deps --target /tmp/site WHEELS/*.whl && export PYTHONPATH=/tmp/site:$PWD
    python benchmarks/gpu_step.py --tokenizer TOK --data prompts.jsonl --out result.json

The models, each with random weights (the time a step takes does not depend on the weights'
values; a random model seldom ends a completion, so every completion runs to the length cap, the
same work for both systems):
- ``smollm2-135m``: SmolLM2-135M-Instruct's architecture (its ``config.json`` from --tokenizer's folder);
- ``qwen2-0.5b``: Qwen2-0.5B's shape (24 layers, width 896, 14 heads over 2 KV heads) with the
  tokenizer's vocabulary, so both models read the same prompts.

Both systems run as ``benchmarks/lm_vs_trl.py`` pins them (one update per batch, the plain KL
term, rewards scaled by the group std, AdamW at a constant rate, bf16 autocast over fp32
weights), beta 0, every completion trained and an optimizer step from every batch (random
weights earn equal rewards, for which grpo-seq would otherwise skip the backward pass and the
step), the whole batch in one forward/backward pass as TRL's batch size here makes it. Each run is its own
process; the order alternates per model.

Recorded per run: seconds per step (median over the steps after the first), generation's share
(grpo-seq's ``perf/sample_seconds``; TRL's ``_generate``, timed with the GPU synchronised),
completion tokens per second of the whole step and of generation alone, peak GPU memory
(``torch.cuda.max_memory_allocated`` of the process), and the update's model FLOPs utilisation:
``6 N T / (t_update x peak)``, N the parameters, T the tokens (prompt and completion) of the
batch, t_update the step minus generation (scoring, forward/backward and optimizer),
peak ``--peak_tflops`` (dense bf16; 989 for an H100 SXM or H200).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lm_vs_trl  # noqa: E402  (the two workers and the pinned settings)
import record  # noqa: E402

QWEN2_05B = dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6,
                 rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu")
SYSTEMS = [lm_vs_trl.NO_SKIP, "trl"]
# grpo-seq doing TRL's work: an optimizer step from every batch (random weights earn equal rewards,
# a batch grpo-seq's LM job otherwise leaves untrained) and the whole batch in one forward/backward
# pass (TRL's per_device_train_batch_size is the batch here)
OURS_AS_TRL = ("--skip_steps_without_signal", "false", "--micro_batch_size", "0")


def random_model(name: str, tokenizer: Path, out: Path) -> tuple[Path, int]:
    """A folder with ``name``'s architecture, random weights and ``tokenizer``'s files; its parameter count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    own = json.loads((tokenizer / "config.json").read_text())
    config = (AutoConfig.from_pretrained(tokenizer) if name == "smollm2-135m" else
              AutoConfig.for_model(**QWEN2_05B, vocab_size=own["vocab_size"], bos_token_id=own.get("bos_token_id"),
                                   eos_token_id=own.get("eos_token_id")))
    model = AutoModelForCausalLM.from_config(config)
    folder = out / name
    model.save_pretrained(folder)
    for f in tokenizer.iterdir():
        if f.name != "config.json" and f.suffix in (".json", ".jinja", ".txt", ".model"):
            shutil.copy(f, folder / f.name)
    return folder, sum(p.numel() for p in model.parameters())


def figures(run: dict, a: argparse.Namespace, params: int, prompt_tokens: float) -> dict:
    """Medians over the steps after the first: step and generation seconds, tokens per second, MFU."""
    k = 1 if len(run["step_seconds"]) > 1 else 0
    steps, gens, toks = run["step_seconds"][k:], run["generate_seconds"][k:], run["completion_tokens"][k:]
    update = [s - g for s, g in zip(steps, gens)]
    batch_tokens = [t + prompt_tokens for t in toks]
    return {
        "step_seconds": statistics.median(steps),
        "generate_seconds": statistics.median(gens),
        "update_seconds": statistics.median(update),
        "generate_share": statistics.median(g / s for g, s in zip(gens, steps)),
        "completion_tokens_per_second": statistics.median(t / s for t, s in zip(toks, steps)),
        "generated_tokens_per_second": statistics.median(t / g for t, g in zip(toks, gens)),
        "peak_gpu_gib": run.get("peak_gpu_gib"),
        "update_mfu": statistics.median(6 * params * t / (u * a.peak_tflops * 1e12) for t, u in zip(batch_tokens, update)),
        # grpo-seq's update, phase by phase (its trainer times each with the GPU synchronised)
        **{f"{phase}_seconds": statistics.median(run[f"{phase}_seconds"][k:]) for phase in ("score", "backward", "optimizer")
           if None not in run.get(f"{phase}_seconds", [None])},
    }


def prompt_token_count(tokenizer: Path, data: Path, a: argparse.Namespace) -> float:
    """Prompt tokens of one step's batch (each prompt G times), averaged over the run's steps."""
    from transformers import AutoTokenizer

    from grpo_seq.io.prompt_data import chat_prompts, read_rows
    from reward_fns.gsm8k import GSM8K_INSTRUCTION, GSM8K_SYSTEM_PROMPT

    tok = AutoTokenizer.from_pretrained(tokenizer)
    rows = chat_prompts(read_rows(data), system_prompt=GSM8K_SYSTEM_PROMPT, instruction=GSM8K_INSTRUCTION)
    ids = [tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True) for r in rows]
    lengths = [len(i["input_ids"] if hasattr(i, "keys") else i) for i in ids]
    return statistics.fmean(lengths) * a.prompts_per_step * a.num_generations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    lm_vs_trl.add_run_arguments(ap, steps=3, steps_help="Optimizer steps per run; the first is the warm-up.")
    ap.set_defaults(prompts_per_step=8, num_generations=8, max_completion_length=512, temperature=1.0)
    ap.add_argument("--tokenizer", type=Path, required=True,
                    help="A folder with SmolLM2-135M-Instruct's config.json and tokenizer files.")
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen2-0.5b"], choices=["smollm2-135m", "qwen2-0.5b"])
    ap.add_argument("--peak_tflops", type=float, default=989.0, help="The GPU's dense bf16 peak, for the MFU.")
    ap.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                    help="cpu: a check of this script itself, with small --max_completion_length and batches")
    ap.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS,
                    help="Run only these; with --keep_from, the others' runs come from that record.")
    ap.add_argument("--keep_from", type=Path,
                    help="An earlier record of this benchmark whose runs of the systems not run now are kept "
                         "(each run keeps the meta of the call that measured it).")
    ap.add_argument("--out", type=Path, default=record.default_out("gpu_step"))
    a = ap.parse_args()
    if a.model:
        ap.error("--model: this benchmark builds its own random-weight models (--models names them)")
    a.gradient_checkpointing, a.seed = False, 0
    import torch

    if a.device == "gpu" and not torch.cuda.is_available():
        ap.error("--device gpu: no CUDA GPU here (--device cpu checks this script on the CPU)")
    meta = record.meta()
    result = {"meta": meta, "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
              "models": {}}
    kept = json.loads(a.keep_from.read_text()) if a.keep_from else None
    with tempfile.TemporaryDirectory() as tmp:
        data = lm_vs_trl.first_rows(a.data, a.steps * a.prompts_per_step, Path(tmp) / "prompts.jsonl")
        prompt_tokens = prompt_token_count(a.tokenizer, data, a)
        for k, name in enumerate(a.models):
            folder, params = random_model(name, a.tokenizer, Path(tmp))
            entry = result["models"][name] = {"parameters": params, "runs": {}}
            for system in (SYSTEMS if k % 2 == 0 else SYSTEMS[::-1]):
                if system not in a.systems:
                    earlier = kept["models"][name]["runs"][system] if kept else None
                    if earlier is not None:
                        entry["runs"][system] = {"meta": kept["meta"], **earlier}
                    continue
                runner = lm_vs_trl.run_trl if system == "trl" else lm_vs_trl.run_ours
                kw = {} if system == "trl" else {"skip_zero_advantage": False, "extra": OURS_AS_TRL}
                run = runner(a, folder, data, "bf16", 0.0, Path(tmp) / f"{name}_{system}", **kw)
                entry["runs"][system] = {"meta": meta, **run, **figures(run, a, params, prompt_tokens)}
                f = entry["runs"][system]
                print(f"{name} {system}: {f['step_seconds']:.2f} s/step, generation {f['generate_share']:.0%} "
                      f"({f['generated_tokens_per_second']:.0f} tok/s), peak {f['peak_gpu_gib'] or 0:.2f} GiB, "
                      f"update MFU {f['update_mfu']:.1%}", flush=True)
                record.prepare(a.out).write_text(json.dumps(result, indent=2))
            if len(entry["runs"]) < 2:
                continue
            ours, trl = entry["runs"][lm_vs_trl.NO_SKIP], entry["runs"]["trl"]
            entry["ratios"] = {"step_seconds": ours["step_seconds"] / trl["step_seconds"],
                               "generated_tokens_per_second": ours["generated_tokens_per_second"] / trl["generated_tokens_per_second"],
                               "peak_gpu_gib": ours["peak_gpu_gib"] / trl["peak_gpu_gib"] if ours["peak_gpu_gib"] and trl["peak_gpu_gib"] else None}
            print(f"{name}: grpo-seq / TRL step time {entry['ratios']['step_seconds']:.2f}, generation speed "
                  f"{entry['ratios']['generated_tokens_per_second']:.2f}x, peak memory {entry['ratios']['peak_gpu_gib']}")
            record.prepare(a.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
