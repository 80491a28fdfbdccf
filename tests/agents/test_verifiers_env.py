"""A verifiers environment trained as an agent (grpo_seq/agents/verifiers_env.py), on a stand-in of
verifiers' shape (fake_verifiers/: verifiers 0.4 pins openai<3, which the openai here is not): its
tasks are the items, each rollout one streamed episode against the rollout's own base URL, recorded,
rewarded by the environment's rubric."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import forkrun  # tests/forkrun.py: a command that ends at once runs forked from a warm process
import pytest
from tiny_lm import save_tiny_lm

from grpo_seq.cli.commands import main
from grpo_seq.io.sources.verifiers import _load

FAKE = Path(__file__).resolve().parent / "fake_verifiers"
TINY = ["--max_completion_length", "6", "--max_total_tokens", "400", "--num_groups", "2", "--num_generations", "2",
        "--torch_threads", "1"]


@pytest.fixture
def fake_verifiers(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE))
    for name in [m for m in sys.modules if m == "verifiers" or m.startswith("verifiers.")]:
        monkeypatch.delitem(sys.modules, name)
    _load.cache_clear()
    import verifiers.v1 as vf

    yield vf
    _load.cache_clear()


def test_a_verifiers_environment_trains_with_its_own_rubric(fake_verifiers, tmp_path):
    save_tiny_lm(tmp_path / "tiny")
    out = tmp_path / "run"
    main(["train-agent", "--model", str(tmp_path / "tiny"), "--rollout", "verifiers:fake-qa", "--dataset",
          "verifiers:fake-qa", "--dataset_config", '{"agent": {"max_turns": 1}}', "--max_steps", "2",
          "--log_completions_every", "1", "--output_dir", str(out), *TINY])
    # loaded once, for the items and the rollouts, with the local harness and runtime under the user's config
    (config,) = fake_verifiers.LOADED
    assert config == {"taskset": {"id": "fake-qa"}, "agent": {"harness": {"id": "null"},
                                                              "runtime": {"type": "subprocess"}, "max_turns": 1}}
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"step"' in x]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(s["agent/calls"] == 1 and 0 < s["agent/reply_chars"] and "reward/rollout" in s for s in steps)
    first = json.loads((out / "completions" / "step_0001.jsonl").read_text().splitlines()[0])
    assert first["conversation"][0]["role"] == "assistant" and first["conversation"][0]["trained"]  # the streamed call
    assert first["prompt"][0]["content"] in [q for q, _ in fake_verifiers.QATaskset.QUESTIONS]


def test_a_taskset_verifiers_cannot_load_is_one_line_naming_it(fake_verifiers, tmp_path, capsys):
    save_tiny_lm(tmp_path / "tiny")
    with pytest.raises(SystemExit) as stop:
        main(["train-agent", "--model", str(tmp_path / "tiny"), "--rollout", "verifiers:nope", "--dataset",
              "verifiers:nope", "--output_dir", str(tmp_path / "run"), *TINY])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and err.count("\n") == 0, err
    assert err == ("error: --rollout verifiers:nope: verifiers could not load it: ValueError: no module exports a "
                   "Taskset for id 'nope'")


def test_a_failed_episode_is_one_line_naming_the_item_and_verifiers_error(fake_verifiers, tmp_path, capsys,
                                                                       monkeypatch):
    save_tiny_lm(tmp_path / "tiny")
    monkeypatch.setenv("FAKE_VERIFIERS_HARNESS_FAILS", "1")
    with pytest.raises(SystemExit) as stop:
        main(["train-agent", "--model", str(tmp_path / "tiny"), "--rollout", "verifiers:fake-qa", "--dataset",
              "verifiers:fake-qa", "--max_steps", "1", "--output_dir", str(tmp_path / "run"), *TINY])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and err.startswith("error: rollout verifiers:fake-qa on item --dataset "
                                                   "verifiers:fake-qa task "), err
    assert err.endswith("the verifiers episode failed: HarnessError: harness setup: no uv"), err


def test_without_verifiers_installed_the_line_says_how_to_install_it(tmp_path):
    res = forkrun.run([sys.executable, "-m", "grpo_seq.cli.commands", "train-agent", "--model", "x", "--rollout",
                       "verifiers:fake-qa", "--dataset", "verifiers:fake-qa", "--output_dir", str(tmp_path / "r")],
                      capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and res.stderr.startswith("error: verifiers environments need the package verifiers"), \
        res.stderr[-2000:]
    assert not (tmp_path / "r").exists()
