"""Benchmarks run as a user runs them, with tiny settings: a subprocess, or, where a benchmark starts
a process per run, its main() here with each run forked from a warm process (:func:`run_main`)."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import forkrun  # tests/forkrun.py: Python programs forked from a warm process

ROOT = Path(__file__).resolve().parents[2]


def warm_run(cmd, check=False, capture_output=False, text=False, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run``'s contract for a Python program, forked from the warm server."""
    res = forkrun.run(cmd, **kwargs)
    if not capture_output:
        sys.stdout.write(res.stdout)
        sys.stderr.write(res.stderr)
    if check and res.returncode:
        raise subprocess.CalledProcessError(res.returncode, cmd, res.stdout, res.stderr)
    return res


def run_main(monkeypatch, script: str, *args: str, pythonpath: str = str(ROOT)) -> None:
    """``python benchmarks/<script> args`` from the repository's root, as the benchmark's main() in
    this process, each run it starts (benchmarks/record.py's ``run``) forked from the warm server:
    the same programs without a fresh interpreter's imports for each."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [f"benchmarks/{script}", *args])
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, *sys.argv])
    monkeypatch.setenv("PYTHONPATH", pythonpath)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import record

    monkeypatch.setattr(record, "RUNNER", warm_run)
    spec = importlib.util.spec_from_file_location(f"benchmark_{Path(script).stem}", ROOT / "benchmarks" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()


def test_cartpole_vs_sb3_writes_consistent_rows_curves_and_ratios(tmp_path, monkeypatch, capsys):
    pytest.importorskip("stable_baselines3", reason="the SB3 baseline needs the bench extra: pip install -e '.[bench]'")
    pytest.importorskip("matplotlib", reason="the plot needs the bench extra: pip install -e '.[bench]'")
    total, every = 3000, 1000
    out = tmp_path / "b.json"
    run_main(monkeypatch, "cartpole_vs_sb3.py", "--seeds", "0", "--total_env_steps", str(total), "--eval_every",
             str(every), "--out", str(out))
    printed = capsys.readouterr().out
    assert "| ours | 0 |" in printed and "| sb3 | 0 |" in printed
    d = json.loads(out.read_text())
    for key in ["command", "machine", "settings", "medians", "rows", "ratio_solve_seconds_median",
                "ratio_solve_env_steps_median", "ratio_solve_seconds_per_seed", "ratio_solve_seconds_max"]:
        assert key in d, key
    assert "--seeds 0" in d["command"]
    assert {"platform", "cpu_count", "torch", "gymnasium", "stable_baselines3", "date"} <= set(d["machine"])
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"

    rows = {r["system"]: r for r in d["rows"]}
    assert set(rows) == {"ours", "sb3"} and len(d["rows"]) == 2
    for system, r in rows.items():
        steps = [p["env_steps"] for p in r["curve"]]
        assert steps == sorted(set(steps)), (system, steps)  # strictly increasing
        # each evaluation follows the update that crossed the next multiple of eval_every
        crossed = [s // every for s in [0] + steps[:-1]]
        assert all(b > a for a, b in zip(crossed, crossed[1:])), (system, steps)
        assert steps[-1] == r["env_steps"]  # and the last at the budget's end: ours never pass it, SB3 may
        assert total - 2 < r["env_steps"] <= total if system == "ours" else r["env_steps"] >= total
        assert r["final_eval_return"] == r["curve"][-1]["return"]
        assert all(b["seconds"] > a["seconds"] for a, b in zip(r["curve"], r["curve"][1:]))
        assert 0.05 < r["peak_rss_gib"] < 8
        first = next((p for p in r["curve"] if p["return"] >= 475), None)
        assert r["solved"] == (first is not None)
        assert r["solved_env_steps"] == (first["env_steps"] if first else None)
    assert all(p["env_steps"] % 256 == 0 for p in rows["sb3"]["curve"])  # 8 envs x n_steps 32 per update

    # One seed: the median ratio is the seed's ratio, with an unsolved run as inf (written as null).
    ours, sb3 = (rows[s]["solved_env_steps"] or math.inf for s in ("ours", "sb3"))
    ratio = d["ratio_solve_env_steps_median"]
    if ratio is None:
        assert math.isinf(ours)
    else:
        assert ratio == pytest.approx(ours / sb3)
    assert d["medians"]["ours"]["solved_env_steps"] == rows["ours"]["solved_env_steps"]


def test_lm_vs_trl_runs_both_systems_on_the_same_prompts(tmp_path, monkeypatch):
    pytest.importorskip("trl", reason="the TRL side needs the dev extra: pip install -e '.[dev]'")
    from tiny_lm import save_tiny_lm

    model = save_tiny_lm(tmp_path / "tiny")
    out = tmp_path / "lm.json"
    steps, prompts, G = 3, 2, 2
    run_main(monkeypatch, "lm_vs_trl.py", "--model", str(model), "--data", str(ROOT / "tests/data/arith.jsonl"),
             "--steps", str(steps), "--prompts_per_step", str(prompts), "--num_generations", str(G),
             "--max_completion_length", "6", "--precisions", "fp32", "--betas", "0.04", "--seeds", "0", "--out", str(out),
             pythonpath=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    d = json.loads(out.read_text())
    (cell,) = d["cells"]
    # one seed: the averaging over seeds is checked on hand-made runs (test_lm_vs_trl_combine_...)
    assert sorted((r["system"], r["seed"]) for r in cell["runs"]) == [("grpo-seq", 0), ("trl", 0)]
    for run in cell["runs"]:
        # One figure per optimizer step; completion tokens bounded by the length limit.
        assert len(run["step_seconds"]) == len(run["reward"]) == len(run["completion_tokens"]) == steps
        assert all(0 < t <= prompts * G * 6 for t in run["completion_tokens"])
        assert all(0.0 <= r <= 2.0 for r in run["reward"])  # correctness + format, each in [0, 1]
        assert run["kl"][0] == pytest.approx(0.0, abs=1e-6)  # policy == reference before the first update
        assert 0.1 < run["peak_rss_gib"] < 16
    ours, trl = cell["grpo-seq"], cell["trl"]
    for system in ("grpo-seq", "trl"):  # each system's curve: its one run's rewards
        (r0,) = (r["reward"] for r in cell["runs"] if r["system"] == system)
        assert cell[system]["reward_per_step"] == pytest.approx(r0)
        assert cell[system]["reward_mean"] == pytest.approx(sum(r0) / steps)
    assert cell["ratio_step_seconds_median"] == pytest.approx(ours["step_seconds_median"] / trl["step_seconds_median"])
    assert cell["ratio_peak_rss"] == pytest.approx(ours["peak_rss_gib"] / trl["peak_rss_gib"])


def test_lm_replay_our_updates_on_trls_completions_land_where_trls_do(tmp_path, monkeypatch):
    """Three TRL steps recorded, replayed through our trainer: the same rewards and masks, and weights
    within 0.2% of TRL's movement, where scoring at the wrong temperature lands 5% away."""
    pytest.importorskip("trl", reason="the TRL side needs the dev extra: pip install -e '.[dev]'")
    from tiny_lm import save_tiny_lm

    model = save_tiny_lm(tmp_path / "tiny")
    out = tmp_path / "replay.json"
    run_main(monkeypatch, "lm_replay_vs_trl.py", "--model", str(model), "--data", str(ROOT / "tests/data/arith.jsonl"),
             "--steps", "3", "--prompts_per_step", "2", "--num_generations", "3", "--max_completion_length", "8",
             "--reward_fns", "tiny_lm:length_reward", "--out", str(out), pythonpath=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    same, control = json.loads(out.read_text())["records"]["0.0"]["runs"]
    assert (same["score_temperature"], control["score_temperature"]) == (0.7, 1.0)
    for s in same["steps"]:
        assert s["rewards_max_abs_diff"] == 0 and s["mask_rows_differing"] == 0
        assert s["advantages_max_abs_diff"] < 1e-2  # TRL divides by std + 1e-4, we by the std
        assert s["grad_norm"]["grpo-seq"] == pytest.approx(s["grad_norm"]["trl"], rel=1e-2)
    assert same["steps"][0]["weights_gap"] < 1e-4
    assert same["final_weights_gap"] < 2e-3
    assert control["final_weights_gap"] > 20 * same["final_weights_gap"]


def test_env_sweep_summaries_match_their_runs(tmp_path):
    # Two configs, two seeds, a tiny budget: whatever is solved, each summary must be its rows'.
    out = tmp_path / "sweep.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    res = forkrun.run([sys.executable, "benchmarks/env_sweep.py", "--seeds", "0", "1", "--cap", "3000",
                          "--after", "1", "--configs", "{}", '{"num_generations": 4}', "--out", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [r["config"] for r in results] == [{}, {"num_generations": 4}]
    for r in results:
        assert [row["seed"] for row in r["rows"]] == [0, 1]
        steps = [row["solved_env_steps"] or math.inf for row in r["rows"]]
        assert r["solved"] == sum(s < math.inf for s in steps)
        assert r["median_env_steps"] == (steps[0] + steps[1]) / 2 and r["max_env_steps"] == max(steps)
        for row in r["rows"]:
            # --after 1: a solved run stops after one more evaluation (or at the cap); an unsolved one has none
            assert len(row["later_evals"]) <= (1 if row["solved_env_steps"] else 0)
            # the run's last evaluation, solved or not (eval_every 1,000 within a 3,000-step cap)
            assert row["final_eval"] is not None and row["final_eval"] == (row["later_evals"] or [row["final_eval"]])[-1]
    assert res.stdout.count("SUMMARY") == 2


def test_env_sweep_record_holds_one_question_per_id_in_page_order(tmp_path):
    # Questions are gathered from scratch sweep files (--from_records, nothing trained) into one record.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    meta = {"command": "x", "date": "d", "commit": "c", "dirty": False, "machine": {}}
    scratch = []
    for k in range(2):
        scratch.append(tmp_path / f"s{k}.json")
        scratch[-1].write_text(json.dumps([{"config": {"seed_note": k}, "meta": meta, "rows": []}]))
    rec = tmp_path / "record.json"

    def sweep(*args):
        return forkrun.run([sys.executable, "benchmarks/env_sweep.py", *map(str, args)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)

    for qid, src, words in [("q1", scratch[0], "first"), ("q2", scratch[1], "second"), ("q1", scratch[1], "again")]:
        res = sweep("--from_records", src, "--question", f"question {words}", "--id", qid, "--descriptions", words,
                    "--out", rec)
        assert res.returncode == 0, res.stderr[-3000:]
    questions = json.loads(rec.read_text())["questions"]
    # q1 was replaced where it stood, q2 appended after it
    assert [(q["id"], q["question"]) for q in questions] == [("q1", "question again"), ("q2", "question second")]
    assert questions[0]["results"][0]["config"] == {"seed_note": 1} and questions[0]["results"][0]["description"] == "again"
    # one question of a record is a source too; an unknown one is named
    res = sweep("--from_records", f"{rec}#q2", "--question", "copy", "--id", "q3", "--out", rec)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(rec.read_text())["questions"][2]["results"][0]["config"] == {"seed_note": 1}
    res = sweep("--from_records", f"{rec}#nope", "--question", "copy", "--id", "q4", "--out", rec)
    assert res.returncode != 0 and "has no question 'nope'" in res.stderr
    res = sweep("--from_records", scratch[0], "--question", "no id", "--out", rec)
    assert res.returncode == 2 and "--question and --id go together" in res.stderr
    assert len(json.loads(rec.read_text())["questions"]) == 3


def test_agent_overhead_runs_both_sides_on_the_same_work_and_the_report_renders_it(tmp_path, monkeypatch):
    pytest.importorskip("openai", reason="the agent side needs the agents extra: pip install -e '.[agents]'")
    from tiny_lm import save_tiny_lm

    model = save_tiny_lm(tmp_path / "tiny")
    out = tmp_path / "agent_overhead" / "result.json"
    run_main(monkeypatch, "agent_overhead.py", "--model", str(model), "--steps", "2", "--repeats", "1", "--G", "2",
             "--groups", "2", "--tokens", "4", "--scratch", str(tmp_path / "s"), "--out", str(out),
             pythonpath=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    d = json.loads(out.read_text())
    (lm,), (agent,) = d["runs"]["lm"], d["runs"]["agent"]
    assert len(lm["step_seconds"]) == len(agent["step_seconds"]) == 2
    # the step's G x prompts calls, in batches of up to all four (how many arrive together is the machine's)
    assert all(1.0 <= x <= 4.0 for x in agent["calls_per_decode_batch"])
    assert d["overhead"] == pytest.approx(d["step_seconds"]["agent"] / d["step_seconds"]["lm"] - 1)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import report

    monkey = report.RESULTS
    report.RESULTS = tmp_path
    try:
        text, head = report.agent_overhead()
    finally:
        report.RESULTS = monkey
    assert "Calls per decode batch on the agent side: " in text and f"{100 * d['overhead']:+.1f}%" in head[2]
    assert text.count("| lm |") == text.count("| agent |") == 1


def test_sb3_readme_example_keeps_each_arms_seeds_and_the_report_pairs_them(tmp_path):
    out = tmp_path / "sb3_readme_example" / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    for arm in (["--seeds", "0-1"], ["--seeds", "1", "--arm", "G4", "--over", '{"group_size": 4}'], ["--seeds", "1", "--ppo"]):
        res = forkrun.run([sys.executable, "benchmarks/sb3_readme_example.py", *arm, "--steps", "600", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
    d = json.loads(out.read_text())
    assert [(r["arm"], r["seed"]) for r in d["rows"]] == [("the example", 0), ("the example", 1), ("G4", 1),
                                                          ("PPO (SB3)", 1)]
    assert all(len(r["returns"]) == 5 and r["passed"] == (min(r["returns"]) >= 475) for r in d["rows"])
    assert [r.get("algo") for r in d["rows"]] == [None, None, None, "ppo"]  # SB3's PPO trained the reference arm
    assert len(d["meta"]["command"]) == 3 and d["settings"]["steps"] == 600
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import report

    saved, report.RESULTS = report.RESULTS, tmp_path
    try:
        text, _ = report.sb3_readme_example()
    finally:
        report.RESULTS = saved
    g4 = next(line for line in text.splitlines() if line.startswith("| G4 |"))
    assert " of 1 |" in g4 and "| 1 |" in g4  # one seed, paired with the example's seed 1
    # each row names the code it ran, and the table each arm's
    assert {r["commit"] for r in d["rows"]} == {d["meta"]["commit"]}
    assert g4.endswith(f"| {(d['meta']['commit'] or '')[:7] or '-'} |")


def test_soak_samples_memory_and_stops_the_run_with_sigterm(tmp_path):
    if not Path("/proc/self/status").exists():
        pytest.skip("the soak reads VmRSS from /proc (Linux)")
    out = tmp_path / "soak.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    res = forkrun.run([sys.executable, "benchmarks/soak.py", "--runs", "cartpole", "--minutes", "0.05", "--interval",
                          "0.1", "--workdir", str(tmp_path / "work"), "--out", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = json.loads(out.read_text())["runs"]
    assert run["exit_status_after_sigterm"] == 143  # the recipe checkpointed and exited on SIGTERM
    assert list((tmp_path / "work/cartpole/checkpoints").iterdir())
    times = [t for t, _ in run["samples"]]
    assert len(times) >= 20 and times == sorted(times)
    assert all(r > 50 for _, r in run["samples"][len(times) // 2:])  # a python process with torch: tens of MiB at least
    assert run["rss_mib_max_after_warmup"] >= run["rss_mib_end_of_warmup"] > 0


def _lm_result(path: Path, seeds: list[int], rewards: dict[str, list[list[float]]], **settings) -> Path:
    """A --out file as lm_vs_trl.py writes it: one fp32 cell, one run per system and seed."""
    runs = [{"system": system, "seed": seed, "repeat": 0, "reward": r, "step_seconds": [2.0] * len(r),
             "completion_tokens": [10.0] * len(r), "peak_rss_gib": 1.0, "step_seconds_median": 2.0 if system == "trl" else 1.0,
             "completion_tokens_per_second": 5.0, "reward_mean": sum(r) / len(r)}
            for system, per_seed in rewards.items() for seed, r in zip(seeds, per_seed)]
    result = {"command": "x", "settings": {"steps": 2, "seeds": seeds, "systems": ["grpo-seq", "trl"], **settings},
              "cells": [{"precision": "fp32", "beta": 0.0, "runs": runs}]}
    path.write_text(json.dumps(result))
    return path


def test_lm_vs_trl_combine_averages_every_seed_and_refuses_other_settings(tmp_path):
    a = _lm_result(tmp_path / "a.json", [0], {"grpo-seq": [[0.0, 1.0]], "trl": [[0.5, 0.5]]})
    b = _lm_result(tmp_path / "b.json", [1, 2], {"grpo-seq": [[0.0, 0.5], [0.3, 0.0]], "trl": [[0.0, 0.0], [0.1, 0.4]]})
    out = tmp_path / "ab.json"
    res = forkrun.run([sys.executable, "benchmarks/lm_vs_trl.py", "--combine", str(a), str(b), "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    d = json.loads(out.read_text())
    assert d["settings"]["seeds"] == [0, 1, 2] and d["combined_from"] == [str(a), str(b)]
    (cell,) = d["cells"]
    assert cell["grpo-seq"]["reward_per_step"] == pytest.approx([0.1, 0.5])  # (0 + 0 + 0.3) / 3, (1 + 0.5 + 0) / 3
    assert cell["trl"]["reward_per_step"] == pytest.approx([0.2, 0.3])
    assert cell["grpo-seq"]["runs"] == cell["trl"]["runs"] == 3
    assert cell["ratio_step_seconds_median"] == pytest.approx(0.5)
    # second half = step 2; ours 1.0, 0.5, 0.0 against TRL's 0.5, 0.0, 0.4 -> +0.5, +0.5, -0.4:
    # mean 0.2, sd sqrt((0.09 + 0.09 + 0.36) / 2), standard error sd / sqrt(3) = 0.3
    paired = cell["paired_seeds"]
    assert [r["difference"] for r in paired["per_seed"]] == pytest.approx([0.5, 0.5, -0.4])
    assert paired["mean_difference"] == pytest.approx(0.2) and paired["standard_error"] == pytest.approx(0.3)
    assert paired["t"] == pytest.approx(2 / 3)
    assert (paired["grpo-seq_ahead"], paired["trl_ahead"], paired["level"]) == (2, 1, 0)

    other = _lm_result(tmp_path / "c.json", [3], {"grpo-seq": [[0.0, 0.0]], "trl": [[0.0, 0.0]]}, temperature=1.0)
    res = forkrun.run([sys.executable, "benchmarks/lm_vs_trl.py", "--combine", str(a), str(other), "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "c.json was run with other settings" in res.stderr and "temperature" in res.stderr


def test_lm_vs_trl_runs_grpo_seq_with_and_without_skipping(tmp_path, monkeypatch):
    # The no-skip system trains every completion; the default trains only groups whose rewards
    # differ. The untrained tiny model earns no reward here, so the default trains nothing, and the
    # same seed draws the same completions in both.
    from tiny_lm import save_tiny_lm

    model = save_tiny_lm(tmp_path / "tiny")
    out = tmp_path / "lm.json"
    run_main(monkeypatch, "lm_vs_trl.py", "--model", str(model), "--data", str(ROOT / "tests/data/arith.jsonl"),
             "--steps", "2", "--prompts_per_step", "2", "--num_generations", "2", "--max_completion_length", "6",
             "--precisions", "fp32", "--betas", "0", "--systems", "grpo-seq", "grpo-seq-no-skip", "--out", str(out),
             pythonpath=f"{ROOT}{os.pathsep}{ROOT / 'tests'}")
    (cell,) = json.loads(out.read_text())["cells"]
    skip, every = ({r["system"]: r for r in cell["runs"]}[s] for s in ("grpo-seq", "grpo-seq-no-skip"))
    assert skip["zero_std_groups"] == every["zero_std_groups"] == [1.0, 1.0]
    assert skip["completion_tokens"] == every["completion_tokens"]
    assert skip["trained_fraction"] == [0.0, 0.0] and every["trained_fraction"] == [1.0, 1.0]


def test_text_env_before_after_plays_held_out_episodes_around_training(tmp_path, monkeypatch):
    pytest.importorskip("textarena", reason="GuessTheNumber needs the textarena extra: pip install -e '.[textarena]'")
    from tiny_lm import save_tiny_lm

    model = save_tiny_lm(tmp_path / "tiny")
    data = tmp_path / "gsm8k"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.jsonl").write_text((ROOT / "tests/data/arith.jsonl").read_text())
    out = tmp_path / "results" / "text_env_before_after" / "result.json"
    run_main(monkeypatch, "text_env_before_after.py", "--model", str(model), "--steps", "2", "--minutes", "0",
             "--eval_n", "3", "--gsm8k_eval_n", "3", "--eval_batch", "2", "--G", "2", "--groups", "1",
             "--jobs", "2",  # conditions in processes of their own, rows in order
             "--gsm8k_tokens", "8", "--gsm8k_dir", str(data), "--scratch", str(tmp_path / "scratch"), "--out", str(out))
    d = json.loads(out.read_text())
    assert [r["condition"] for r in d["rows"]] == ["guess", "gsm8k_calculator", "gsm8k_plain"]
    for r in d["rows"]:
        assert r["steps"] == 2 and r["before"]["episodes"] == r["after"]["episodes"] == 3
        assert 0 <= r["before"]["solved"] <= 1 and len(r["reward_per_step"]) == 2
        shares = [r["phases"][f"{k}_share"] for k in ("generation", "environment", "scoring", "update")]
        assert all(0 <= s <= 1 for s in shares) and sum(shares) <= 1 and r["phases"]["reply_tokens_per_second"] > 0
    # the held-out GSM8K episodes are the dev file's first problems, in order; without the tool, one reply each
    plain = d["rows"][2]
    first = [json.loads(line)["question"] for line in (data / "dev.jsonl").read_text().splitlines()[:3]]
    played = [json.loads(line) for line in (tmp_path / "scratch" / "gsm8k_plain" / "after.jsonl").read_text().splitlines()]
    assert [p["prompt"].split("\n")[0] for p in played] == first and plain["after"]["turns"] == 1
    assert d["rows"][0]["held_out_env_kwargs"] == {} and d["rows"][0]["first_held_out_seed"] == 2**31
    # the report renders the record (both tables, every condition)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import report

    text = report.text_env_tables(d)
    assert all(name in text for name in report.TEXT_ENV_CONDITIONS.values()) and text.count("| condition |") == 2


def test_sb3_suite_reads_each_cases_outcome_from_junit_xml(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import sb3_suite

    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.sb3_suite.test_sb3_run" name="test_ppo[GRPO]"/>'
        '<testcase classname="tests.sb3_suite.test_sb3_run" name="test_x"><skipped type="pytest.skip" message="CUDA not available"/></testcase>'
        '<testcase classname="tests.sb3_suite.test_sb3_identity" name="test_discrete[env1-GRPO]"><skipped type="pytest.xfail" message="slow"/></testcase>'
        '<testcase classname="tests.sb3_suite.test_sb3_logger" name="test_fps"><failure message="assert 96 &gt;= 100"/></testcase>'
        '</testsuite></testsuites>')
    got = {name: case["outcome"] for name, case in sb3_suite.outcomes(junit).items()}
    assert got == {"test_sb3_run.py::test_ppo[GRPO]": "passed", "test_sb3_run.py::test_x": "skipped",
                   "test_sb3_identity.py::test_discrete[env1-GRPO]": "xfailed", "test_sb3_logger.py::test_fps": "failed"}
    # a case is the same case whichever class it ran as
    assert sb3_suite.same_case("test_discrete[env1-GRPO]") == sb3_suite.same_case("test_discrete[env1-PPO]")


def test_sb3_identity_counts_the_seeds_at_the_tests_bar_and_keeps_the_tests_seed():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import sb3_identity

    runs = [{"env": "IdentityEnvMultiBinary", "arm": "PPO", "seed": s, "mean_return": r}
            for s, r in [(2, 95.0), (3, 90.0), (4, 90.05)]]
    got = sb3_identity.summarise(runs)["IdentityEnvMultiBinary"]["PPO"]
    # evaluate_policy asserts mean > reward_threshold: 90 itself fails the test, 90.05 passes
    assert got == {"seeds": 3, "passed": 2, "median": 90.05, "test_seed": 90.0}
    assert sb3_identity.seed_list("0-2") == [0, 1, 2] and sb3_identity.seed_list("5") == [5]
    # CartPole without an id: its threshold 475 is reached at or above, and PPO is not an arm there
    cart = [{"env": "CartPole without an id", "arm": "GRPO", "seed": s, "mean_return": r}
            for s, r in [(0, 475.0), (1, 474.9), (3, 500.0)]]
    assert sb3_identity.summarise(cart)["CartPole without an id"]["GRPO"]["passed"] == 2
    assert "PPO" not in sb3_identity.arms_of("CartPole without an id") and "PPO" in sb3_identity.arms_of("IdentityEnv")


def test_control_vs_sb3_extend_keeps_every_row_and_refuses_a_seed_it_has(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot needs the bench extra: pip install -e '.[bench]'")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import argparse

        import control_vs_sb3 as c
    finally:
        sys.path.pop(0)
    out = tmp_path / "r.json"
    kept = {"meta": {"command": "python benchmarks/control_vs_sb3.py --seeds 0 1", "commit": "abc", "date": "d"},
            "settings": {"envs": ["CartPole-v1", "Acrobot-v1"], "seeds": {"CartPole-v1": [0, 1], "Acrobot-v1": [0, 1]},
                         "thresholds": {"CartPole-v1": 475.0, "Acrobot-v1": -100.0}},
            "rows": [{"env_id": e, "system": s, "seed": k} for e in ("CartPole-v1", "Acrobot-v1")
                     for s in c.SYSTEMS for k in (0, 1)]}
    out.write_text(json.dumps(kept))
    before = out.read_text()
    # a seed the record has for the env: exit 2, one error line naming it, the record untouched
    res = forkrun.run([sys.executable, "benchmarks/control_vs_sb3.py", "--envs", "CartPole-v1", "--seeds", "1", "2",
                          "--extend", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "error: --extend:" in res.stderr and "'CartPole-v1': [1]" in res.stderr
    assert out.read_text() == before

    args = argparse.Namespace(out=out, seeds=[2, 3], envs=["CartPole-v1"], systems=list(c.SYSTEMS))
    thresholds = {"CartPole-v1": 475.0}
    rows, earlier, new = c.extend_record(args, ["CartPole-v1"], thresholds)
    assert len(rows) == 8 and new == {"CartPole-v1": [2, 3]}  # every row kept; new seeds for the named env only
    assert earlier == {"CartPole-v1": [0, 1], "Acrobot-v1": [0, 1]}
    assert args.envs == ["CartPole-v1", "Acrobot-v1"] and thresholds["Acrobot-v1"] == -100.0
    assert args.earlier_commands == [kept["meta"]["command"]]
    assert args.earlier_note.startswith("CartPole-v1 seeds 2, 3 (ours, sb3) added by `")
    args.stop_after, args.jobs = 3, 1
    assert c.by_env(args, args.envs) == {}  # the record gives no settings of its own: nothing to keep


def test_control_vs_sb3_merge_keeps_the_other_envs_provenance_and_their_own_settings(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import argparse

        import control_vs_sb3 as c
    finally:
        sys.path.pop(0)
    out = tmp_path / "r.json"
    kept = {"meta": {"command": ["python a", "python b --stop_after 3 --jobs 2"], "commit": "bbb", "date": "d2",
                     "note": "rows of Pendulum-v1 from `python a` at commit aaa, d1"},
            "settings": {"envs": ["Pendulum-v1", "LunarLanderContinuous-v3"], "stop_after": 3, "jobs": 2,
                         "stop_after_by_env": {"Pendulum-v1": 0}, "jobs_by_env": {"Pendulum-v1": 1},
                         "seeds": {"Pendulum-v1": [0], "LunarLanderContinuous-v3": [0]},
                         "thresholds": {"Pendulum-v1": -200.0, "LunarLanderContinuous-v3": 200.0}},
            "rows": [{"env_id": "Pendulum-v1", "system": s, "seed": 0, "from_commit": "aaa"} for s in c.SYSTEMS]
            + [{"env_id": "LunarLanderContinuous-v3", "system": s, "seed": 0} for s in c.SYSTEMS]}
    out.write_text(json.dumps(kept))
    args = argparse.Namespace(out=out, envs=["MinAtar/Breakout-v1"], systems=list(c.SYSTEMS), stop_after=0, jobs=2)
    thresholds = {"MinAtar/Breakout-v1": None}
    rows, seeds = c.merge_record(args, thresholds)
    assert len(rows) == 4 and seeds == kept["settings"]["seeds"]
    # the rows the earlier record's own run measured now name it; those it had kept keep their commit
    assert {r["env_id"]: r["from_commit"] for r in rows} == {"Pendulum-v1": "aaa", "LunarLanderContinuous-v3": "bbb"}
    assert args.earlier_commands == kept["meta"]["command"]
    assert args.earlier_note == ("rows of Pendulum-v1 from `python a` at commit aaa, d1; rows of "
                                 "LunarLanderContinuous-v3 from `python b --stop_after 3 --jobs 2` at commit bbb, d2")
    assert args.envs == ["Pendulum-v1", "LunarLanderContinuous-v3", "MinAtar/Breakout-v1"]
    # each kept env keeps how it ran where this run differs: Pendulum one run at a time, LunarLander stopped after 3
    assert c.by_env(args, args.envs) == {"stop_after_by_env": {"LunarLanderContinuous-v3": 3},
                                         "jobs_by_env": {"Pendulum-v1": 1}}


def test_minibatch_cost_times_both_scorings_of_the_same_updates(tmp_path):
    out = tmp_path / "m.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    res = forkrun.run([sys.executable, "benchmarks/minibatch_cost.py", "--steps", "2", "--out", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    d = json.loads(out.read_text())
    assert "--steps 2" in d["meta"]["command"] and len(d["rows"]) == 3
    for r in d["rows"]:
        # the same seed: both trainers sampled the same episodes and took the same optimizer steps
        assert r["one-step"]["tokens"] == r["masked"]["tokens"]
        assert r["one-step"]["optimizer_steps"] == r["masked"]["optimizer_steps"] >= 2
        assert math.isclose(r["train_ratio"], r["one-step"]["train"] / r["masked"]["train"])


def test_lm_learning_compares_every_reward_function_per_item_over_seeds():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import report

    def run(trained_format: list[float]) -> dict:
        return {"heldout": {"n": 4}, "per_reward": {
            "correctness": {"scores": {"base": [0.0, 0.0, 0.0, 0.0], "trained": [0.0, 0.0, 0.0, 0.0]}},
            "format": {"scores": {"base": [0.0, 1.0, 0.0, 0.0], "trained": trained_format}}}}

    fns = report._per_reward([run([1.0, 1.0, 0.0, 0.0]), run([1.0, 1.0, 1.0, 0.0])])
    # format: per item, trained averaged over seeds (1, 1, 0.5, 0) minus base (0, 1, 0, 0) = (1, 0, 0.5, 0)
    assert fns["format"]["base"] == 0.25 and fns["format"]["trained"] == 0.625
    mean, low, high = fns["format"]["gain"]
    # mean 0.375, sd of (1, 0, 0.5, 0) = 0.4787, half-width 1.96 * 0.4787 / 2 = 0.469
    assert mean == pytest.approx(0.375) and low == pytest.approx(0.375 - 0.46913, abs=1e-4) and high == pytest.approx(0.75)
    assert fns["correctness"]["gain"] == (0.0, 0.0, 0.0)  # nothing moved: no interval to speak of
    # every seed right on all 4: differences (1, 0, 1, 1), mean 0.75, sd 0.5, half-width 1.96 * 0.5 / 2 = 0.49
    text, headline = report._per_reward_table({("gsm8k", "{}", 0, "defaults", 15.0): [run([1.0] * 4)] * 3})
    assert "| `gsm8k` | defaults | 3 | 15 | `format` | 25.0% | 100.0% | +75.0 [+26.0, +75.0] |" in text
    assert headline == ["GSM8K, 4 dev problems (defaults arm, 3 seeds, 15 min): correctness 0% -> 0%, "
                        "+0.0 [+0.0, +0.0] (holds 0) points; format 25% -> 100%, +75.0 [+26.0, +75.0] points"]


def test_control_vs_sb3_reads_rl_zoos_policy_kwargs_and_scores_sb3_on_the_envs_own_actions():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import control_vs_sb3 as c
    finally:
        sys.path.pop(0)
    import gymnasium as gym
    import numpy as np
    from torch import nn

    kwargs = c.ppo_kwargs({"n_envs": 1, "normalize": True, "learning_rate": "lin_1e-3", "use_sde": True,
                           "policy_kwargs": "dict(log_std_init=-2, activation_fn=nn.ReLU, net_arch=dict(pi=[8]))"})
    assert kwargs["policy_kwargs"] == {"log_std_init": -2, "activation_fn": nn.ReLU, "net_arch": {"pi": [8]}}
    assert kwargs["use_sde"] is True and kwargs["learning_rate"](0.5) == pytest.approx(5e-4)
    assert "n_envs" not in kwargs and "normalize" not in kwargs
    assert c.threshold_of("Pendulum-v1") == -200.0 and c.threshold_of("MountainCarContinuous-v0") == 90.0
    # a torque of 10 is clipped to Pendulum's bound of 2: the returns of the first episode of each env,
    # reset with the stream's seeds as PolicyEvaluator resets them
    returns = c.NativeEvaluator("Pendulum-v1", 2, seed=7)(lambda obs: np.full((len(obs), 1), 10.0))
    for i, got in enumerate(returns):
        env = gym.make("Pendulum-v1")
        env.reset(seed=7 + i)
        total, done = 0.0, False
        while not done:
            _, r, terminated, truncated, _ = env.step(np.array([2.0], dtype=np.float32))
            total, done = total + r, terminated or truncated
        assert got == pytest.approx(total)


def test_sb3_actor_samples_from_the_policys_softmax_when_not_greedy():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import cartpole_vs_sb3 as c
    finally:
        sys.path.pop(0)
    import numpy as np
    import torch
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", "CartPole-v1", policy_kwargs={"net_arch": [4]}, seed=0, device="cpu")
    with torch.no_grad():  # logits log(1/4), log(3/4) whatever the observation
        model.policy.action_net.weight.zero_()
        model.policy.action_net.bias.copy_(torch.log(torch.tensor([0.25, 0.75])))
    actor = c.SB3Actor(model.policy)
    obs = np.zeros((20_000, 4), dtype=np.float32)
    assert (actor.numpy_actor(greedy=True)(obs) == 1).all()
    drawn = actor.numpy_actor(np.random.default_rng(0), greedy=False)(obs)
    assert abs((drawn == 1).mean() - 0.75) < 0.02 and set(drawn.tolist()) == {0, 1}
    again = actor.numpy_actor(np.random.default_rng(0), greedy=False)(obs)
    assert (again == drawn).all()  # seeded by its rng
    with pytest.raises(ValueError, match="need an rng"):
        actor.numpy_actor(greedy=False)


def test_control_vs_sb3_gives_ppo_on_minatar_rl_zoos_atari_settings_our_torso_and_no_threshold():
    pytest.importorskip("rl_zoo3", reason="rl-zoo3's settings need the control extra: pip install -e '.[control]'")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import control_vs_sb3 as c
    finally:
        sys.path.pop(0)
    import gymnasium as gym
    import torch
    from stable_baselines3.common.policies import ActorCriticCnnPolicy

    from grpo_seq.policies.actor import make_actor

    zoo = c.zoo_settings("MinAtar/Breakout-v1")  # rl-zoo3's "atari" entry, without ALE's wrapper and frame stack
    assert (zoo["policy"], zoo["learning_rate"], zoo["n_envs"]) == ("CnnPolicy", "lin_2.5e-4", 8)
    assert "env_wrapper" not in zoo and "frame_stack" not in zoo
    assert (zoo["n_timesteps"], zoo["max_episode_steps"]) == (1_000_000, 1_000)  # our family's budget and cap
    kwargs = c.ppo_kwargs(zoo)
    assert "max_episode_steps" not in kwargs and kwargs["clip_range"](1.0) == pytest.approx(0.1)
    space = gym.spaces.Box(0, 1, (10, 10, 4), dtype=bool)
    policy = ActorCriticCnnPolicy(space, gym.spaces.Discrete(3), lambda _: 1e-3, **kwargs["policy_kwargs"])
    assert policy.features_extractor.features_dim == 128
    # the evaluator hands flat observations; the actor acts through torch on the frames
    frames = torch.rand(6, 10, 10, 4)
    actor = c.SB3Actor(policy)
    assert actor.numpy_acting is False
    got = make_actor(actor, greedy=True)(frames.reshape(6, -1).numpy())
    assert (got == policy.get_distribution(frames).mode().numpy()).all()
    # no threshold: nothing is "solved", only the returns count
    assert c.threshold_of("MinAtar/Breakout-v1") is None
    run = {"curve": [{"env_steps": 10, "seconds": 1.0, "return": 3.0}], "env_steps": 10, "seconds": 1.0, "peak_rss_gib": 0.1}
    rows = [c.make_row("MinAtar/Breakout-v1", s, 0, run, None) for s in c.SYSTEMS]
    assert rows[0]["solved"] is None and rows[0]["final_eval_return"] == 3.0
    assert c.summarise(rows, "MinAtar/Breakout-v1")["ours"]["solved"] is None


def test_ppo_heads_bins_arm_drops_gsde_takes_our_bins_and_steps_the_env_with_each_bins_value():
    pytest.importorskip("rl_zoo3", reason="rl-zoo3's settings need the control extra: pip install -e '.[control]'")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import control_vs_sb3 as c
        import ppo_heads as h
    finally:
        sys.path.pop(0)
    import gymnasium as gym
    import numpy as np

    zoo, bins = h.arm_settings("Pendulum-v1", "gaussian")
    assert zoo["use_sde"] is True and bins is None
    zoo, bins = h.arm_settings("Pendulum-v1", "bins")
    assert "use_sde" not in zoo and "sde_sample_freq" not in zoo and bins == 21 and zoo["gamma"] == 0.9  # Pendulum's own
    assert h.arm_settings("MountainCarContinuous-v0", "bins")[1] == 3  # the family's own bins there
    zoo, bins = h.arm_settings("Pendulum-v1", "gaussian_no_sde")
    assert "use_sde" not in zoo and bins is None

    class Echo(gym.Env):  # observes the action it was given
        observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

        def reset(self, seed=None, options=None):
            return np.zeros(2, np.float32), {}

        def step(self, action):
            return np.asarray(action, np.float32), 0.0, False, False, {}

    env = c.BinnedActions(Echo(), 5)
    assert env.action_space == gym.spaces.MultiDiscrete([5, 5])
    # bin b of 5 over [-1, 1] is -1 + 0.5 b, per dimension, for one action or a row per env
    assert c.bin_values(env.values, [0, 3]).tolist() == [-1.0, 0.5]
    assert c.bin_values(env.values, np.array([[4, 2], [1, 0]])).tolist() == [[1.0, 0.0], [-0.5, -1.0]]
    env.reset(seed=3)
    for step in range(5):
        assert env.step(np.array([4, step]))[0].tolist() == [1.0, -1.0 + 0.5 * step]


def test_gpu_step_figures_skip_the_warm_up_step_and_give_the_updates_mfu():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import argparse

    import gpu_step

    run = {"step_seconds": [10.0, 4.0, 6.0], "generate_seconds": [9.0, 3.0, 4.0],
           "completion_tokens": [100.0, 200.0, 300.0], "peak_gpu_gib": 2.5}
    f = gpu_step.figures(run, argparse.Namespace(peak_tflops=1e-12), params=10, prompt_tokens=50.0)
    # the first step is the warm-up: steps (4, 6), generation (3, 4), updates (1, 2)
    assert f["step_seconds"] == 5.0 and f["generate_seconds"] == 3.5 and f["update_seconds"] == 1.5
    assert f["generate_share"] == pytest.approx((3 / 4 + 4 / 6) / 2)
    assert f["completion_tokens_per_second"] == 50.0  # 200 / 4 and 300 / 6
    assert f["generated_tokens_per_second"] == pytest.approx((200 / 3 + 300 / 4) / 2)
    # 6 N T / (t_update x peak), T = completion + prompt tokens, a peak of 1 FLOP/s: 6*10*250/1, 6*10*350/2
    assert f["update_mfu"] == pytest.approx((15000 + 10500) / 2)
    assert f["peak_gpu_gib"] == 2.5


def test_a_sweep_question_mixing_short_and_whole_runs_gives_every_row_each_column():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import report

    def entry(seeds, later):
        return {"config": {"env_id": "Pendulum-v1", "mu": 10},
                "rows": [{"seed": s, "solved_env_steps": 1000, "later_evals": later, "threshold": -200} for s in seeds]}

    short, whole = entry([1, 2, 3], [-150.0]), entry([4, 5, 6], [-150.0, -250.0, -180.0, -300.0])
    head, rows = report.sweep_table([short, whole])
    assert head[5:] == ["stayed solved after solving", "seeds falling", "final evaluation below the threshold"]
    assert rows[0][0].endswith("(seeds 1-3)") and rows[1][0].endswith("(seeds 4-6)")  # one config, two sweeps
    assert rows[0][5:] == ["3 of 3", "-", "-"]
    # whole runs: 3 of 5 evaluations (the solving one counted) at -200 or more, under 80%: all three fall
    assert rows[1][5:] == ["-", "3 (lowest 60%)", 3]
