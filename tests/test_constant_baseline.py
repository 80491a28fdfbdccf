"""The reward no constant answer can game (grpo_seq/scoring/constant_baseline.py), by hand."""

from __future__ import annotations

import json

import pytest
import torch

from grpo_seq.math.batch import RolloutBatch, TextSamples
from grpo_seq.scoring.constant_baseline import ConstantBaseline
from grpo_seq.scoring.rewards import RewardScorer

ROWS = [{"prompt": f"q{i}", "answer": a} for i, a in enumerate(["1", "1", "2", "3"])]


def exact(completions, answer, **_):
    return [float(c == a) for c, a in zip(completions, answer)]


def batch_of(rows, completions) -> RolloutBatch:
    b = len(completions)
    return RolloutBatch(context=torch.zeros(b, 1, dtype=torch.long), tokens=torch.zeros(b, 1, dtype=torch.long),
                        mask=torch.ones(b, 1), group=torch.arange(b) // 2, num_generations=2, rewards=torch.zeros(b),
                        text=TextSamples(prompts=[r["prompt"] for r in rows], prompt_texts=[r["prompt"] for r in rows],
                                         completions=list(completions), completion_texts=list(completions),
                                         completion_ids=[[0]] * b, columns={"answer": [r["answer"] for r in rows]}))


def test_each_reward_loses_what_the_same_answer_earns_on_every_reference_item():
    fn = ConstantBaseline(RewardScorer([exact]), ROWS, items=4)
    # "1" is right on 2 of the 4 items, "2" on 1, "5" on none
    batch = fn(batch_of([ROWS[0], ROWS[2], ROWS[3], ROWS[3]], ["1", "2", "5", "1"]))
    assert batch.rewards.tolist() == pytest.approx([1 - 0.5, 1 - 0.25, 0 - 0.0, 0 - 0.5])
    assert batch.metrics["reward/exact"] == 0.5  # the function's own mean, uncorrected
    assert batch.metrics["reward/constant_score"] == pytest.approx((0.5 + 0.25 + 0 + 0.5) / 4)


@pytest.mark.parametrize("answer", ["1", "2", "3", "7"])
def test_a_constant_answer_earns_nothing_over_the_items(answer):
    fn = ConstantBaseline(RewardScorer([exact]), ROWS, items=100)  # more than there are: every row
    batch = fn(batch_of(ROWS, [answer] * len(ROWS)))
    assert batch.rewards.sum().item() == pytest.approx(0.0)


def test_a_reward_that_ignores_the_item_cancels_and_weights_apply():
    def shape(completions, **_):
        return [float(len(c)) for c in completions]

    fn = ConstantBaseline(RewardScorer([exact, shape], weights=[2.0, 0.5]), ROWS, items=4)
    batch = fn(batch_of([ROWS[2], ROWS[0]], ["2", "33"]))
    # 2 * (right - share of items it is right on) + 0.5 * (length - length)
    assert batch.rewards.tolist() == pytest.approx([2 * (1 - 0.25), 2 * (0 - 0.0)])
    assert fn.weights == [2.0, 0.5]


def test_the_reference_items_are_drawn_once_by_the_seed():
    rows = [{"prompt": f"q{i}", "answer": str(i)} for i in range(50)]
    a, b, c = (ConstantBaseline(RewardScorer([exact]), rows, items=5, seed=s) for s in (0, 0, 1))
    assert a.refs == b.refs and a.refs != c.refs and len(a.refs) == 5


@pytest.mark.parametrize("argv, says", [
    (["--multi_objective_aggregation", "normalize_then_sum"], "corrects the summed reward; --multi_objective_aggregation "
                                                              "normalize_then_sum reads each function's own values, got 8"),
    ([], None)])
def test_the_option_is_refused_where_each_functions_values_are_read(argv, says, capsys):
    from grpo_seq.cli import parse_config
    from grpo_seq.jobs.lm_spec import LMJob

    if says is None:
        assert parse_config(LMJob, ["--constant_baseline_items", "8"]).constant_baseline_items == 8
        return
    with pytest.raises(SystemExit) as e:
        parse_config(LMJob, ["--constant_baseline_items", "8", *argv])
    assert e.value.code == 2 and capsys.readouterr().err == f"error: --constant_baseline_items: {says}\n"


def test_a_run_with_the_baseline_trains_on_the_corrected_reward(tmp_path):
    from grpo_seq.jobs.lm import run_lm_job
    from grpo_seq.jobs.lm_spec import LMJob
    from tiny_lm import save_tiny_lm

    def length(completions, **_):  # the same on every item: the baseline cancels it
        return [float(len(c)) for c in completions]

    save_tiny_lm(tmp_path / "policy")
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in "abcd"))
    spec = LMJob(model=str(tmp_path / "policy"), dataset=str(tmp_path / "data.jsonl"), num_groups=2, num_generations=2,
                 max_steps=1, max_completion_length=4, output_dir=str(tmp_path / "run"), retain_freed_memory=False,
                 constant_baseline_items=3)
    run_lm_job(spec, reward_funcs=[length])
    m = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert m["reward/constant_score"] == pytest.approx(m["reward/length"])
    assert m["reward/mean"] == pytest.approx(0.0)  # what the trainer compared: nothing left to prefer


def test_programs_whose_rewards_are_not_reward_functions_refuse_it():
    from grpo_seq.errors import ConfigError
    from grpo_seq.jobs.agent_spec import AgentJob
    from grpo_seq.jobs.text_env_spec import TextEnvJob

    with pytest.raises(ConfigError, match="--constant_baseline_items: a text environment's prompts and rewards"):
        TextEnvJob(env_id="Wordle-v0", constant_baseline_items=4)
    with pytest.raises(ConfigError, match="--constant_baseline_items: an agent's prompts and rewards are its own"):
        AgentJob(rollout="a:b", dataset="d.jsonl", constant_baseline_items=4)


def test_the_trl_door_passes_it_to_the_run():
    from grpo_seq.jobs.lm_spec import LMJob
    from grpo_seq.trl import GRPOConfig

    options = GRPOConfig(constant_baseline_items=4).lm_options(num_prompts=10)
    assert options["constant_baseline_items"] == 4 and LMJob(**options).constant_baseline_items == 4
    assert GRPOConfig().lm_options(num_prompts=10)["constant_baseline_items"] == 0
