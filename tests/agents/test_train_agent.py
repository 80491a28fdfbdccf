"""grpo-seq train-agent on a tiny model: an agent program trained by import path writes its run,
and a broken one stops the run with one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_lm import save_tiny_lm

from grpo_seq.cli.commands import main
from grpo_seq.jobs import AgentJob, load_spec

TINY = ["--max_completion_length", "6", "--max_total_tokens", "400", "--num_groups", "2", "--num_generations", "2",
        "--torch_threads", "1"]


@pytest.fixture(scope="module")
def user(tmp_path_factory) -> Path:
    """A user's folder: a tiny model and a few items (the agents come from agent_programs.py)."""
    root = tmp_path_factory.mktemp("agent_user")
    save_tiny_lm(root / "tiny")
    (root / "items.jsonl").write_text("".join(json.dumps({"question": f"{i} + {i}?", "answer": str(i + i)}) + "\n"
                                              for i in range(3)))
    return root


def before_and_after(out: Path) -> list[list[dict]]:
    return [[json.loads(x) for x in (out / "eval_heldout" / f"{w}.jsonl").read_text().splitlines()]
            for w in ("before", "after")]


def test_train_agent_trains_a_two_call_agent_and_evaluates_it(user, tmp_path):
    out = tmp_path / "run"
    main(["train-agent", "--model", str(user / "tiny"), "--rollout", "agent_programs:tool_then_answer",
          "--dataset", str(user / "items.jsonl"), "--eval_dataset", str(user / "items.jsonl"), "--eval_size", "2",
          "--max_steps", "2", "--log_completions_every", "1", "--output_dir", str(out), *TINY])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "step" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert steps[-1]["agent/calls"] == 2 and "agent/first_length" in steps[-1] and "reward/rollout" in steps[-1]
    conversation = json.loads((out / "completions" / "step_0001.jsonl").read_text().splitlines()[0])["conversation"]
    assert [(m["role"], m["trained"]) for m in conversation] == [("assistant", True), ("tool", False),
                                                                  ("assistant", True)]
    heldout = json.loads((out / "eval_heldout" / "eval.json").read_text())
    assert heldout["before"]["items"] == heldout["after"]["items"] == 2
    # the LM programs' figures on the rewards: intervals, the paired difference, the majority answer ("0": a tie)
    assert heldout["n"] == 2 and heldout["scores"]["base"] == [r["reward"] for r in before_and_after(out)[0]]
    assert len(heldout["base"]["interval"]) == len(heldout["trained"]["interval"]) == 2
    assert heldout["best_constant"]["completion"] == "0" and heldout["scores"]["best_constant"] == [1.0, 0.0]
    assert "trained_minus_base" in heldout and "trained_minus_constant" in heldout
    assert len((out / "eval_heldout" / "after.jsonl").read_text().splitlines()) == 2
    spec = load_spec(out / "config.json")
    assert isinstance(spec, AgentJob) and spec.rollout == "agent_programs:tool_then_answer"
    assert (out / "model" / "config.json").exists()
    # the run folder's spec repeats the run by its kind; a resume goes on from the checkpoint
    main(["run", str(out / "config.json"), "--output_dir", str(tmp_path / "again"), "--max_steps", "1",
          "--eval_size", "0"])
    assert json.loads((tmp_path / "again" / "summary.json").read_text())["steps"] == 1
    main(["train-agent", "--config", str(out / "config.json"), "--resume_from", str(out), "--max_steps", "3"])
    resumed = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in resumed if "step" in r] == [1, 2, 3]


def test_a_held_out_evaluation_runs_a_training_steps_rollouts_at_once(user, tmp_path):
    # 3 held-out items, 1 x 2 rollouts a step: the evaluation runs 2 at once, not all 3 (a large
    # held-out set in one decode batch would run each call past --rollout_timeout on a CPU)
    import agent_programs

    agent_programs.RUNNING.update(now=0, most=0)
    out = tmp_path / "run"
    main(["train-agent", "--model", str(user / "tiny"), "--rollout", "agent_programs:counts_company",
          "--dataset", str(user / "items.jsonl"), "--eval_dataset", str(user / "items.jsonl"), "--eval_size", "3",
          "--max_steps", "0", "--output_dir", str(out), *TINY, "--num_groups", "1"])
    before = [json.loads(line) for line in (out / "eval_heldout" / "before.jsonl").read_text().splitlines()]
    assert len(before) == 3 and max(r["metrics"]["most_at_once"] for r in before) == 2


@pytest.mark.parametrize("rollout, words", [
    ("agent_programs:nowhere", "--rollout agent_programs:nowhere: 'agent_programs' has no attribute 'nowhere'"),
    ("agent_programs:hangs", "rollout agent_programs:hangs on item ITEMS line 1: did not end within --rollout_timeout "
                             "0.5 s"),
    ("agent_programs:says_great", "rollout agent_programs:says_great on item ITEMS line 1: returned 'great'"),
    ("agent_programs:never_calls",
     "rollout agent_programs:never_calls on item ITEMS line 1: never called the endpoint"),
    ("agent_programs:crashes", "rollout agent_programs:crashes on item ITEMS line 1: raised RuntimeError: the tool "
                               "server is down"),
])
def test_a_broken_agent_is_one_error_line_and_exit_2(user, tmp_path, capsys, rollout, words):
    items = user / "items.jsonl"
    with pytest.raises(SystemExit) as stopped:
        main(["train-agent", "--model", str(user / "tiny"), "--rollout", rollout, "--dataset", str(items),
              "--max_steps", "1", "--shuffle_prompts", "false", "--output_dir", str(tmp_path / "run"), *TINY,
              *(["--rollout_timeout", "0.5"] if rollout.endswith("hangs") else [])])
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2
    assert err[-1].startswith("error: " + words.replace("ITEMS", str(items))), err
    assert sum(line.startswith("error:") for line in err) == 1


def test_drop_failed_groups_draws_another_item_in_a_failed_groups_place(user, tmp_path):
    out = tmp_path / "run"
    # items in file order: step 1 draws "0 + 0?" and "1 + 1?"; the second's group fails and "2 + 2?" replaces it
    main(["train-agent", "--model", str(user / "tiny"), "--rollout", "agent_programs:fails_on_ones",
          "--dataset", str(user / "items.jsonl"), "--max_steps", "1", "--shuffle_prompts", "false",
          "--drop_failed_groups", "true", "--log_completions_every", "1", "--output_dir", str(out), *TINY])
    step = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"step"' in line][0]
    assert step["agent/dropped_groups"] == 1 and step["agent/calls"] == 1
    logged = (out / "completions" / "step_0001.jsonl").read_text().splitlines()
    prompts = [json.loads(line)["prompt"] for line in logged]
    assert [p[0]["content"] for p in prompts] == ["0 + 0?", "0 + 0?", "2 + 2?", "2 + 2?"]


def test_a_rollout_whose_history_was_rewritten_trains_both_sequences(user, tmp_path):
    out = tmp_path / "run"
    main(["train-agent", "--model", str(user / "tiny"), "--rollout", "agent_programs:summarises_then_answers",
          "--dataset", str(user / "items.jsonl"), "--max_steps", "2", "--output_dir", str(out), *TINY])
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"step"' in x]
    assert [s["agent/sequences_per_rollout"] for s in steps] == [2.0, 2.0] and all(s["agent/calls"] == 2 for s in steps)


def test_more_sequences_of_an_output_join_the_loss_with_its_advantage():
    """GRPOLoop's join (a stand-in loop: only its reference scoring is used): the outputs' rows,
    then each extra sequence with its output's mean advantage over the output's tokens, its group."""
    from types import SimpleNamespace

    import torch

    from grpo_seq.loop.trainer import GRPOLoop
    from grpo_seq.math.batch import RolloutBatch

    def rows(tokens, mask, **kw):
        return RolloutBatch(context=torch.ones(len(tokens), 2, dtype=torch.long), tokens=torch.tensor(tokens),
                            mask=torch.tensor(mask), num_generations=2, prompt_mask=torch.ones(len(tokens), 2,
                                                                                                dtype=torch.bool), **kw)

    batch = rows([[1, 2, 3], [4, 5, 0]], [[True, True, True], [True, True, False]], group=torch.tensor([0, 0]),
                 rewards=torch.tensor([1.0, 0.0]))
    batch.advantages = torch.tensor([[0.5, 0.5, 0.5], [-0.5, -0.5, 0.0]])
    batch.extra = rows([[7, 8]], [[True, True]], group=torch.tensor([0]), rewards=torch.tensor([0.0]), partial=True)
    batch.extra_of = torch.tensor([1])
    scored = []
    loop = SimpleNamespace(scoring=SimpleNamespace(score_ref=lambda policy, b: scored.append(b)), policy=None)
    joined = GRPOLoop._with_extra_sequences(loop, batch)
    assert scored == [batch.extra] and joined.partial and joined.extra is None
    assert joined.tokens.tolist() == [[1, 2, 3], [4, 5, 0], [7, 8, 0]]
    assert joined.advantages[2].tolist() == [-0.5, -0.5, 0.0]  # its output's, on its own tokens
    assert joined.group.tolist() == [0, 0, 0] and joined.mask[2].tolist() == [True, True, False]


def test_dynamic_sampling_refuses_rollouts_of_several_sequences_in_one_line(user, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train-agent", "--model", str(user / "tiny"), "--rollout", "agent_programs:summarises_then_answers",
              "--dataset", str(user / "items.jsonl"), "--max_steps", "1", "--dynamic_sampling", "true",
              "--output_dir", str(tmp_path / "run"), *TINY])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and err.startswith("error: LoopConfig.dynamic_sampling: AgentGroupSampler made several "
                                                   "sequences of one output"), err
