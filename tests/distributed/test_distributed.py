"""Two processes under accelerate (torchrun + gloo on CPU): whole groups per process, shared gradients."""

import itertools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, tmp_path):
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests")])  # the workers import tests/tiny_lm.py
    env = {**os.environ, "PYTHONPATH": path, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    # --multi_gpu starts two real processes even without a GPU; --cpu would start only one.
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(free_port()), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory) -> Path:
    """The folder that one launch of ddp_worker.py filled: CartPole, LM and text-env files per rank."""
    from tiny_lm import save_tiny_lm

    out = tmp_path_factory.mktemp("ddp")
    model = save_tiny_lm(out / "tiny")
    res = launch(["tests/distributed/ddp_worker.py", str(out), str(model)], out)
    assert res.returncode == 0, res.stderr[-4000:]
    return out


def test_parameters_identical_across_ranks_after_updates(scenarios):
    r0, r1 = (load_file(str(scenarios / f"rank{r}.safetensors")) for r in (0, 1))
    assert int(r0["world"]) == 2 == int(r1["world"])
    torch.testing.assert_close(r0["params"], r1["params"], rtol=0, atol=0)
    # each process sampled its own groups: the start states differ between ranks
    assert not torch.allclose(r0["starts"], r1["starts"])
    # At step 2 rank 1 had only zero-advantage outputs and rank 0 had some to train: the step
    # completed (no process left waiting in the all-reduce) with the same weights everywhere.
    assert int(r1["trained"][1]) == 0 and int(r0["trained"][1]) > 0
    # Token statistics are means over the tokens scored on any process: rank 0's here.
    assert torch.isfinite(r0["entropy"]).all() and torch.equal(r0["entropy"], r1["entropy"])


def test_cartpole_recipe_on_two_processes(scenarios):
    # ddp_recipe.py: the recipe as launched, with minibatches of env steps. Each process has its own
    # episodes, so its own count of steps; both cut them into the same number of minibatches (from
    # the steps of both), or one would wait for the other's all-reduce until the timeout.
    run = scenarios / "recipe"
    summary = json.loads((run / "first_summary.json").read_text())
    assert summary["num_processes"] == 2
    assert 4000 - 16 < summary["env_steps"] <= 4000  # never past the budget
    # rewards and lengths are gathered from both ranks: 2 processes x 2 groups x 4 episodes = 16
    rows = [json.loads(x) for x in (run / "first_metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "reward/mean" in r]
    prev = 0
    for r in train:
        assert r["perf/tokens_total"] - prev == round(r["policy/completion_length"] * 16)
        assert r["policy/completion_length_max"] >= r["policy/completion_length"]
        prev = r["perf/tokens_total"]
    assert max(r["perf/optimizer_steps"] for r in train) > 1  # the steps of a batch were cut

    # The final checkpoint holds each rank's RNG streams and sampler position; both ranks resumed from it.
    assert {"rng_state_0.json", "rng_state_1.json"} <= set(json.loads((run / "first_checkpoint.json").read_text()))
    more = summary["env_steps"] + 2000
    resumed = json.loads((run / "summary.json").read_text())
    assert more - 16 < resumed["env_steps"] <= more and resumed["iterations"] > summary["iterations"]
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines() if "reward/mean" in x]
    assert steps == list(range(1, resumed["iterations"] + 1))
    # the units moved off CartPole's thresholds to the moments of both processes' observations
    units = json.loads((run / "policy/policy.json").read_text())["kwargs"]
    assert units["obs_shift"] is not None and units["obs_scale"] != [2.4, 1.0, 0.2094, 1.0]


def test_language_model_on_two_processes(scenarios):
    r0, r1 = (json.loads((scenarios / f"lm_rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world"] == 2 == r1["world"]
    # Gradients accumulated over micro-batches (no_sync) and averaged once: same parameters everywhere.
    torch.testing.assert_close(torch.tensor(r0["params"]), torch.tensor(r1["params"]), rtol=0, atol=0)
    # Each rank drew its own prompts: 2 steps x 2 prompts x 2 ranks cover all 8 once.
    assert sorted(r0["answers"] + r1["answers"], key=int) == [str(i) for i in range(8)]
    assert r0["kl"] == r1["kl"]


def test_grpo_seq_launch_ends_a_bad_option_as_one_line_with_its_status(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    cmd = [sys.executable, "-m", "grpo_seq.cli.commands", "launch", "--num_processes", "2",
           "--main_process_port", str(free_port()), "recipes/cartpole.py", "--learning_rate", "-1",
           "--output_dir", str(tmp_path / "run")]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    # both processes refuse the option; the first says so, the launcher adds nothing
    assert res.returncode == 2, res.stderr[-3000:]
    assert res.stderr.strip() == "error: LoopConfig.learning_rate: must be > 0, got -1.0"
    assert not (tmp_path / "run").exists()


def test_text_env_job_on_two_processes_keeps_groups_whole(scenarios):
    r0, r1 = (json.loads((scenarios / f"text_env_rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world"] == 2 == r1["world"] and len(r0["steps"]) == 2 == len(r1["steps"])
    for s0, s1 in zip(r0["steps"], r1["steps"]):
        for s in (s0, s1):
            # each process plays its own 2 groups whole: all G = 3 episodes of a start state on one process
            assert s["num_generations"] == 3 and s["group"] == [0, 0, 0, 1, 1, 1]
            seeds = [s["seeds"][g * 3:(g + 1) * 3] for g in range(2)]
            assert all(len(set(group)) == 1 for group in seeds) and seeds[0][0] != seeds[1][0]
        assert not set(s0["seeds"]) & set(s1["seeds"])  # the processes draw different start states
        # the step's tokens are gathered from both processes, and both see the same total
        assert s0["tokens_total"] == s1["tokens_total"]
    both = [s0["reply_tokens"] + s1["reply_tokens"] for s0, s1 in zip(r0["steps"], r1["steps"])]
    assert [s["tokens_total"] for s in r0["steps"]] == list(itertools.accumulate(both))
    torch.testing.assert_close(torch.tensor(r0["params"]), torch.tensor(r1["params"]), rtol=0, atol=0)
    assert json.loads((scenarios / "run" / "summary.json").read_text())["num_processes"] == 2
