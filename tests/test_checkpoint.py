"""Checkpoints: a run killed with SIGTERM and resumed ends where an uninterrupted one does;
damaged checkpoints are refused by name; nothing but tensors is unpickled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import forkrun
import pytest
import torch
from safetensors.torch import load_file

from grpo_seq import CategoricalMLPPolicy, CausalLMPolicy, EnvGroupSampler, LoopConfig, GRPOLoop, LMGroupSampler
from grpo_seq.io.checkpoint import CheckpointError, list_checkpoints, resolve_checkpoint, write_manifest
from grpo_seq.loop.stopping import resume_command
from tiny_lm import make_tiny_lm

ROOT = Path(__file__).resolve().parents[1]
# long enough that the signal, sent at the first evaluation, lands mid-run with steps left to resume
CARTPOLE = [sys.executable, str(ROOT / "recipes/cartpole.py"), "--total_env_steps", "4000", "--eval_every", "1000"]


def _env() -> dict:
    return {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    whole = tmp_path_factory.mktemp("whole")
    res = forkrun.run([*CARTPOLE, "--output_dir", str(whole)], env=_env())
    assert res.returncode == 0, res.stderr[-3000:]
    return whole


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_run_then_resume_ends_exactly_like_an_uninterrupted_run(tmp_path, uninterrupted, sig):
    whole, cut = uninterrupted, tmp_path / "cut"

    # The signal as soon as the run reports its first evaluation: it is then mid-training.
    proc = subprocess.Popen([*CARTPOLE, "--output_dir", str(cut)], env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("env steps"):
            proc.send_signal(sig)
            break
    seen.append(proc.stdout.read())
    assert proc.wait() == 128 + sig, "".join(seen)
    out = "".join(seen)
    assert f"{sig.name} received" in out and f"--resume_from {cut}" in out
    assert not (cut / "summary.json").exists()  # it stopped before the end
    (stopped,) = list_checkpoints(cut)

    res = forkrun.run([*CARTPOLE, "--resume_from", str(cut)], env=_env())  # only the signalled run needs its own interpreter
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"resumed from {stopped}: step {int(stopped.name[5:])}, " in res.stdout + res.stderr
    a, b = json.loads((whole / "summary.json").read_text()), json.loads((cut / "summary.json").read_text())
    assert int(stopped.name[5:]) < b["iterations"]
    assert (b["iterations"], b["env_steps"], b["final_eval_return"]) == (a["iterations"], a["env_steps"], a["final_eval_return"])
    # CPU, fixed seed, every RNG restored: bit-identical weights, not merely close.
    wa, wb = load_file(whole / "policy/model.safetensors"), load_file(cut / "policy/model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # metrics.jsonl holds each step once, as the uninterrupted run's does.
    steps = lambda p: [json.loads(ln)["step"] for ln in (p / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert steps(cut) == steps(whole)


def cartpole_trainer(out: Path, **kw) -> GRPOLoop:
    torch.manual_seed(0)
    cfg = LoopConfig(num_generations=2, num_groups=1, beta=0.0, learning_rate=1e-2, advantage="stepwise",
                     loss_type="bnpo", output_dir=str(out), **kw)
    return GRPOLoop(cfg, CategoricalMLPPolicy(4, 2), EnvGroupSampler("CartPole-v1", 1, 2, seed=3))


def test_damaged_checkpoint_is_refused_by_name_and_the_previous_one_used(tmp_path, capsys):
    run = tmp_path / "run"
    t = cartpole_trainer(run, save_steps=2, save_total_limit=3)
    for _ in range(4):
        t.step()
        t.maybe_save_checkpoint({"marker": t.step_count})
    step2, step4 = list_checkpoints(run)
    assert [p.name for p in (step2, step4)] == ["step_00000002", "step_00000004"]

    opt = step4 / "optimizer.pt"
    opt.write_bytes(opt.read_bytes()[:100])  # truncated on disk
    with pytest.raises(CheckpointError, match=r"step_00000004: optimizer.pt is truncated"):
        resolve_checkpoint(step4)
    assert resolve_checkpoint(run) == step2
    resumed = cartpole_trainer(tmp_path / "other")
    assert resumed.resume(run) == {"marker": 2} and resumed.step_count == 2
    assert "refused 1 damaged checkpoint(s)" in capsys.readouterr().out

    (step2 / "manifest.json").unlink()  # a folder whose write never finished
    with pytest.raises(CheckpointError, match="every checkpoint is damaged"):
        resolve_checkpoint(run)
    with pytest.raises(CheckpointError, match="no such checkpoint or run folder"):
        resolve_checkpoint(tmp_path / "nowhere")


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    t = cartpole_trainer(tmp_path, save_steps=1, save_total_limit=2)
    (tmp_path / "checkpoints/.step_00000009.tmp").mkdir(parents=True)  # a write cut short by kill -9
    for _ in range(5):
        t.step()
        t.maybe_save_checkpoint()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000004", "step_00000005"]
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]  # no temporaries left


class Payload:
    """Anything but tensors and numbers: a pickle that could run code when loaded."""


def test_an_optimizer_file_holding_objects_is_refused(tmp_path):
    t = cartpole_trainer(tmp_path / "a")
    t.step()
    folder = t.save_checkpoint()
    torch.save({"state": {}, "param_groups": [], "extra": Payload()}, folder / "optimizer.pt")
    write_manifest(folder, 1)  # the manifest agrees: only the loader can catch it
    with pytest.raises(CheckpointError, match="optimizer.pt holds objects other than tensors"):
        cartpole_trainer(tmp_path / "b").resume(folder)


def _reward_sevens(prompts, completions, **_):
    return [c[0]["content"].count("7") / max(1, len(c[0]["content"])) for c in completions]


def lm_trainer(out: Path, lora: bool = False, beta: float = 0.04) -> GRPOLoop:
    from grpo_seq import RewardScorer

    model, tok = make_tiny_lm(seed=0)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    torch.manual_seed(0)
    rows = [{"prompt": [{"role": "user", "content": f"say {i}"}], "answer": str(i)} for i in range(5)]
    cfg = LoopConfig(num_generations=2, num_groups=2, beta=beta, learning_rate=3e-2, output_dir=str(out), seed=1)
    sampler = LMGroupSampler(tok, rows, 2, 2, max_completion_length=6, temperature=1.0, seed=1)
    return GRPOLoop(cfg, CausalLMPolicy(model, tok), sampler, score_fn=RewardScorer([_reward_sevens]))


def _trained(t: GRPOLoop) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in t.policy.named_parameters() if p.requires_grad}


def _without_perf(m: dict) -> dict:
    return {k: v for k, v in m.items() if not k.startswith("perf/")}


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_language_model_resumes_exactly(tmp_path, lora):
    # 5 prompts, 2 per step: the third step starts a new epoch of the prompt order mid-way.
    a = lm_trainer(tmp_path / "a", lora)
    for _ in range(2):
        a.step()
    folder = a.save_checkpoint()
    later = [_without_perf(a.step()) for _ in range(2)]
    weights = _trained(a)

    saved = sorted(p.name for p in (folder / "policy").iterdir())
    assert ("adapter_model.safetensors" in saved) if lora else ("model.safetensors" in saved)
    assert not [n for n in saved if n.endswith((".bin", ".pt", ".pkl"))]

    b = lm_trainer(tmp_path / "b", lora)
    b.resume(tmp_path / "a")
    assert [_without_perf(b.step()) for _ in range(2)] == later
    assert all(torch.equal(weights[n], p) for n, p in _trained(b).items())


def test_resume_command_replaces_an_earlier_resume_flag():
    argv = ["recipes/cartpole.py", "--seed", "3", "--resume_from", "old", "--output_dir", "runs/x"]
    assert resume_command("runs/x", argv) == (
        "python recipes/cartpole.py --seed 3 --output_dir runs/x --resume_from runs/x"
    )


def test_resume_after_kill_9_drops_later_rows_and_a_half_written_line(tmp_path):
    t = cartpole_trainer(tmp_path)
    for _ in range(2):
        t.step()
    t.save_checkpoint()
    for _ in range(2):
        t.step()
    t.close()
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 5, "reward/me')  # the write a kill -9 interrupted
    resumed = cartpole_trainer(tmp_path)
    resumed.resume(tmp_path)
    resumed.step()
    resumed.close()
    steps = [json.loads(ln)["step"] for ln in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_the_final_model_shares_the_last_checkpoints_weights_and_the_optimizer_is_optional(tmp_path, caplog):
    sampler = EnvGroupSampler("CartPole-v1", 1, 2, seed=0)
    cfg = LoopConfig(num_groups=1, num_generations=2, beta=0.0, output_dir=str(tmp_path), save_optimizer=False)
    t = GRPOLoop(cfg, CategoricalMLPPolicy(4, 2), sampler)
    t.step()
    folder = t.save_checkpoint()
    final = t.save()
    assert not (folder / "optimizer.pt").exists()
    weights, linked = final / "model.safetensors", folder / "policy" / "model.safetensors"
    assert os.stat(weights).st_ino == os.stat(linked).st_ino  # one file on disk, two names
    assert (final / "policy.json").read_text() == (folder / "policy" / "policy.json").read_text()
    t.step()
    again = t.save(tmp_path / "later")  # a step after the checkpoint: written, not linked
    assert os.stat(again / "model.safetensors").st_ino != os.stat(linked).st_ino
    t.close()
    resumed = GRPOLoop(LoopConfig(**{**cfg.to_dict(), "resume_from": str(tmp_path)}), CategoricalMLPPolicy(4, 2),
                          EnvGroupSampler("CartPole-v1", 1, 2, seed=0))
    resumed.resume(tmp_path)
    assert resumed.step_count == 1 and "holds no optimizer state" in caplog.text
