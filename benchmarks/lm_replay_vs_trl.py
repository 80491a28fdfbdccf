"""grpo-seq's updates against TRL's on the same completions, step after step.

    python benchmarks/lm_replay_vs_trl.py --steps 20
    python benchmarks/lm_replay_vs_trl.py --steps 20 --beta 0.04

One record for both: ``records`` holds a run per beta, and a run replaces the one of its beta.

The reward curves of lm_vs_trl.py differ by the luck of the draw: each system samples its own
completions, and one solved group moves a step's mean reward by 0.12 to 0.25. This takes the
draw out. TRL's GRPOTrainer trains for --steps steps with lm_vs_trl.py's settings (its own
process), and records every step's batch: the prompts, the token ids and masks of its
completions, its rewards and advantages, and its weights after each step. Then grpo-seq's
GRPOTrainer starts from the same weights and trains on those batches (a sampler that replays
them), with its own completion masks, rewards, advantages, scoring, loss, clipping and AdamW.

After every step it compares the two models' weights, on a fixed sample of 0.1% of the
coordinates of every parameter: ``||theta_ours - theta_trl|| / ||theta_trl - theta_0||``, the
gap as a share of how far TRL's training has moved the weights; at the end, over every weight.
It also sets each step's rewards, advantages, loss, gradient norm and KL side by side.
A control shows what a real fault looks like on the same scale: grpo-seq scoring the same
completions at temperature 1 instead of the temperature they were sampled at (a fault an
earlier version had, and which held its reward flat over 20 steps).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import zlib
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import record  # noqa: E402  (benchmarks/record.py: default --out and the meta block)
from lm_vs_trl import add_run_arguments, first_rows, plain_checkpoint, trl_trainer  # noqa: E402

BATCH_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")


def probe(model: torch.nn.Module) -> torch.Tensor:
    """The same 0.1% of every parameter's coordinates in any copy of the model (seeded by name)."""
    parts = []
    for name, p in sorted(model.named_parameters()):
        g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        idx = torch.randint(p.numel(), (max(1, p.numel() // 1000),), generator=g)
        parts.append(p.detach().reshape(-1)[idx].float())
    return torch.cat(parts)


def relative_gap(ours: torch.Tensor, theirs: torch.Tensor, start: torch.Tensor) -> float:
    moved = (theirs - start).norm()
    return float((ours - theirs).norm() / moved) if moved > 0 else float((ours - theirs).norm())


# -- TRL, recording ------------------------------------------------------------------------------

def trl_worker(a: argparse.Namespace) -> None:
    """TRL trains --steps steps; every batch, log row and weight probe goes to <worker_out>/trl.pt."""
    from safetensors.torch import save_file
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from grpo_seq.scoring.rewards import load_reward_fn
    from reward_fns import REGISTRY

    record: dict = {"batches": [], "rewards": [], "logs": [], "probes": []}

    class Recording(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            record["batches"].append({"rows": [{"prompt": x["prompt"], "answer": x["answer"]} for x in inputs],
                                      **{k: out[k].detach().cpu().clone() for k in BATCH_KEYS}})
            return out

        def _calculate_rewards(self, *args, **kwargs):
            per_fn = super()._calculate_rewards(*args, **kwargs)
            record["rewards"].append(per_fn.detach().cpu().clone())
            return per_fn

    class Probe(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kw):
            record["probes"].append(probe(model))

        def on_step_end(self, args, state, control, model=None, **kw):
            record["probes"].append(probe(model))

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                record["logs"].append(dict(logs))

    trainer = trl_trainer(a, reward_funcs=[load_reward_fn(f, REGISTRY) for f in a.reward_fns], callbacks=[Probe()],
                          trainer_cls=Recording)
    trainer.train()
    out = Path(a.worker_out)
    torch.save(record, out / "trl.pt")
    save_file({n: p.detach().contiguous() for n, p in trainer.model.named_parameters()}, str(out / "trl_final.safetensors"))


def run_trl(a: argparse.Namespace, model: Path, data: Path, out: Path) -> dict:

    cmd = [sys.executable, __file__, "--worker", "trl", "--model", str(model), "--data", str(data),
           "--worker_out", str(out), "--steps", str(a.steps), "--prompts_per_step", str(a.prompts_per_step),
           "--num_generations", str(a.num_generations), "--max_completion_length", str(a.max_completion_length),
           "--temperature", str(a.temperature), "--learning_rate", str(a.learning_rate), "--beta", str(a.beta),
           "--seed", str(a.seed), "--reward_fns", *a.reward_fns]
    proc = record.run(cmd, env={**os.environ, "TQDM_DISABLE": "1"}, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"TRL run failed:\n{proc.stderr[-3000:]}")
    return torch.load(out / "trl.pt", weights_only=True)


# -- grpo-seq, replaying -------------------------------------------------------------------------

class ReplaySampler:
    """Hands the trainer TRL's recorded batches, one per step, as our sampler would have built them."""

    def __init__(self, batches: list[dict], tokenizer, num_generations: int, temperature: float):
        self.batches, self.tokenizer, self.num_generations, self.temperature = batches, tokenizer, num_generations, temperature
        self.num_groups = len(batches[0]["rows"]) // num_generations
        self.step = 0
        self.mask_mismatches: list[int] = []  # rows per step where our completion mask differs from TRL's

    def sample(self, policy):
        """Our sampler's batch, built by the same code (``text_batch``) from TRL's tokens."""
        from grpo_seq.sampling.lm import text_batch

        rec = self.batches[self.step]
        self.step += 1
        G, tok = self.num_generations, self.tokenizer
        rows = rec["rows"][::G]  # TRL keeps a copy of each prompt's row, ids and mask per completion
        if not torch.equal(rec["prompt_ids"], rec["prompt_ids"][::G].repeat_interleave(G, 0)):
            raise ValueError(f"TRL's batch {self.step} is not laid out group by group ({G} rows per prompt)")
        texts = [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
        batch = text_batch(tok, rows, "prompt", G, rec["prompt_ids"][::G], rec["prompt_mask"][::G],
                           rec["completion_ids"], [tok.eos_token_id], self.temperature, texts)
        self.mask_mismatches.append(int((batch.mask != rec["completion_mask"].bool()).any(-1).sum()))
        return batch


def run_ours(a: argparse.Namespace, model_dir: Path, trl: dict, trl_final: Path, score_temperature: float) -> dict:
    from accelerate import Accelerator

    from grpo_seq import CausalLMPolicy, GRPOLoop, LoopConfig, RewardScorer
    from grpo_seq.io.models import load_model_and_tokenizer
    from reward_fns import REGISTRY

    torch.set_num_threads(os.cpu_count() or 1)
    model, tok = load_model_and_tokenizer(str(model_dir), "float32")
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = LoopConfig(
        num_groups=a.prompts_per_step, num_generations=a.num_generations, learning_rate=a.learning_rate,
        lr_schedule="constant", max_grad_norm=1.0, mu=1, epsilon=0.2, beta=a.beta, loss_type="grpo",
        scale_rewards=True, micro_batch_size=8, seed=a.seed,
    )
    sampler = ReplaySampler(trl["batches"], tok, a.num_generations, score_temperature)
    trainer = GRPOLoop(cfg, CausalLMPolicy(model, tok), sampler, Accelerator(cpu=True),
                          score_fn=RewardScorer(a.reward_fns, registry=REGISTRY))
    steps = []
    for k in range(a.steps):
        t0 = time.perf_counter()
        m = trainer.step()
        batch = trainer.last_batch
        rewards_trl = trl["rewards"][k].sum(-1)
        adv_ours = (batch.advantages * batch.mask).sum(-1) / batch.mask.sum(-1).clamp(min=1)
        steps.append({
            "step": k + 1,
            "rewards_max_abs_diff": float((batch.rewards - rewards_trl).abs().max()),
            "advantages_max_abs_diff": float((adv_ours - trl["batches"][k]["advantages"]).abs().max()),
            "mask_rows_differing": sampler.mask_mismatches[k],
            "reward_mean": float(batch.rewards.mean()),
            "zero_std_groups": m["reward/zero_std_groups"],
            "loss": {"grpo-seq": m["loss/policy"], "trl": trl["logs"][k].get("loss")},
            "grad_norm": {"grpo-seq": m["loss/grad_norm"], "trl": trl["logs"][k].get("grad_norm")},
            "kl": {"grpo-seq": m["policy/kl"], "trl": trl["logs"][k].get("kl", 0.0)},
            "weights_gap": relative_gap(probe(model), trl["probes"][k + 1], trl["probes"][0]),
            "seconds": time.perf_counter() - t0,
        })
    from safetensors.torch import load_file

    final = load_file(str(trl_final))
    ours = dict(model.named_parameters())
    diff = torch.cat([(ours[n].detach() - final[n]).reshape(-1) for n in sorted(final)])
    moved = torch.cat([(final[n] - start[n]).reshape(-1) for n in sorted(final)])
    return {
        "score_temperature": score_temperature, "steps": steps,
        "final_weights_gap": float(diff.norm() / moved.norm()),
        "final_max_abs_diff": float(diff.abs().max()), "trl_moved_norm": float(moved.norm()),
        "trl_moved_max_abs": float(moved.abs().max()),
    }


def print_table(result: dict) -> None:
    main = result["runs"][0]
    print("| step | reward mean | groups with equal rewards | rewards, max diff | advantages, max diff "
          "| grad norm, grpo-seq / TRL | loss, grpo-seq / TRL | weights gap |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in main["steps"]:
        print(f"| {s['step']} | {s['reward_mean']:.3f} | {s['zero_std_groups']:.2f} | {s['rewards_max_abs_diff']:.1e} "
              f"| {s['advantages_max_abs_diff']:.1e} | {s['grad_norm']['grpo-seq']:.4f} / {s['grad_norm']['trl']:.4f} "
              f"| {s['loss']['grpo-seq']:+.2e} / {s['loss']['trl']:+.2e} | {s['weights_gap']:.2e} |")
    if any(s["kl"]["trl"] for s in main["steps"]):
        print("KL per step, grpo-seq / TRL: " + ", ".join(f"{s['kl']['grpo-seq']:.2e} / {s['kl']['trl']:.2e}"
                                                          for s in main["steps"]))
    for run in result["runs"]:
        print(f"scored at temperature {run['score_temperature']}: weights gap after {len(run['steps'])} steps "
              f"{run['final_weights_gap']:.2e} of TRL's movement (norm {run['trl_moved_norm']:.3f}); "
              f"largest coordinate gap {run['final_max_abs_diff']:.1e} (TRL's largest move {run['trl_moved_max_abs']:.1e})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(ap, steps=20, steps_help="TRL's steps, replayed by grpo-seq.")
    ap.add_argument("--beta", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0, help="TRL's sampling seed.")
    ap.add_argument("--reward_fns", nargs="+", default=["correctness", "format"],
                    help="Short names or import paths (package.module:function), the same for both.")
    ap.add_argument("--no_control", action="store_true", help="Skip the control run (scoring at temperature 1).")
    ap.add_argument("--out", type=Path, default=record.default_out("lm_replay_vs_trl"),
                    help="Write every figure here as JSON (default: %(default)s).")
    ap.add_argument("--worker", choices=["trl"], help=argparse.SUPPRESS)
    ap.add_argument("--worker_out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.precision, a.gradient_checkpointing = "fp32", False  # what lm_vs_trl's TRL settings read
    if a.worker:
        trl_worker(a)
        return

    model = plain_checkpoint(a.model, a.cache_dir)
    result: dict = {"meta": record.meta(), "command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%d"),
                    "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
                    "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()
                                 if not k.startswith("worker")}}
    import transformers
    import trl as trl_pkg

    result["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl_pkg.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        a.data = first_rows(a.data, a.steps * a.prompts_per_step, Path(tmp) / "prompts.jsonl")
        t0 = time.perf_counter()
        trl = run_trl(a, model, a.data, Path(tmp))
        result["trl_seconds"] = time.perf_counter() - t0
        result["trl_reward_per_step"] = [lg["reward"] for lg in trl["logs"]]
        temperatures = [a.temperature] + ([] if a.no_control else [1.0])
        result["runs"] = [run_ours(a, model, trl, Path(tmp) / "trl_final.safetensors", t) for t in temperatures]
    print_table(result)
    if a.out:  # one record, a run per beta: this run replaces the one of its beta
        kept = json.loads(a.out.read_text()) if a.out.exists() else {"records": {}}
        kept["records"][str(a.beta)] = result
        record.prepare(a.out).write_text(json.dumps(kept, indent=2))


if __name__ == "__main__":
    main()
