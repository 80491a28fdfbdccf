"""A curriculum over a dataset's stages (grpo_seq/sampling/curriculum.py) and the LM job that follows it."""

from __future__ import annotations

import json

import pytest

from grpo_seq.sampling.curriculum import Curriculum


def test_the_next_stage_opens_when_the_mean_of_the_window_reaches_the_threshold():
    c = Curriculum([2, 0, 0, 1, 2], threshold=0.5, window=3)
    assert c.levels == [0, 1, 2] and c.stage == 0 and c.rows() == [1, 2]
    assert [c.observe(v) for v in (1.0, 0.0)] == [False, False]  # not a full window yet
    assert c.observe(0.4) is False  # mean 0.47
    assert c.observe(None) is False and c.recent == [1.0, 0.0, 0.4]  # a step that scored nothing is not recorded
    assert c.observe(0.2) is False and c.recent == [0.0, 0.4, 0.2]  # the last three only
    assert c.observe(1.0) is True  # 0.4, 0.2, 1.0: mean 0.533
    assert c.stage == 1 and c.rows() == [3]


def test_an_opened_stage_starts_its_own_record_and_the_last_stays_open():
    c = Curriculum([0, 1, 1, 2], threshold=0.5, window=2)
    assert c.observe(0.5) is False and c.observe(0.5) is True
    assert c.stage == 1 and c.rows() == [1, 2] and c.recent == []
    assert c.observe(1.0) is False  # the new stage's record has one value
    assert c.observe(0.0) is True and c.stage == 2  # mean exactly the threshold opens it
    assert [c.observe(1.0) for _ in range(4)] == [False] * 4 and c.stage == 2


def test_the_state_round_trips_and_another_dataset_is_refused():
    c = Curriculum([0, 1], threshold=0.5, window=2)
    c.observe(1.0), c.observe(1.0), c.observe(0.25)
    d = Curriculum([1, 0], threshold=0.5, window=2)
    d.load_state_dict(json.loads(json.dumps(c.state_dict())))
    assert (d.stage, d.recent) == (1, [])
    with pytest.raises(ValueError, match=r"had the stages \[0, 1\], this dataset has \[0, 1, 2\]"):
        Curriculum([0, 1, 2], 0.5, 2).load_state_dict(c.state_dict())


@pytest.mark.parametrize("stages, says", [([0, "easy"], "row 2: its 'stage' must be a number, got 'easy'"),
                                          ([True, 0], "row 1: its 'stage' must be a number, got True")])
def test_a_stage_that_is_not_a_number_is_refused_naming_the_row(stages, says):
    with pytest.raises(ValueError, match=says):
        Curriculum(stages, 0.5, 2)


def test_the_sampler_draws_from_the_pool_it_is_given():
    from grpo_seq.sampling import LMGroupSampler
    from tiny_lm import make_tokenizer

    rows = [{"prompt": f"p{i}"} for i in range(6)]
    s = LMGroupSampler(make_tokenizer(), rows, num_groups=2, num_generations=2, seed=3)
    s.draw_from([4, 5])
    assert sorted(s._next_indices() + s._next_indices()) == [4, 4, 5, 5]
    s.draw_from([0])
    assert s._next_indices() == [0, 0]  # the order drawn before is dropped


def _staged_job(tmp_path, **over):
    from grpo_seq.jobs.lm_spec import LMJob
    from tiny_lm import save_tiny_lm

    save_tiny_lm(tmp_path / "policy")
    rows = [{"prompt": f"easy {i}", "stage": 0} for i in range(3)] + [{"prompt": f"hard {i}", "stage": 1} for i in range(3)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return LMJob(**{"model": str(tmp_path / "policy"), "dataset": str(tmp_path / "data.jsonl"), "num_groups": 2,
                    "num_generations": 2, "max_steps": 4, "max_completion_length": 2, "output_dir": str(tmp_path / "run"),
                    "retain_freed_memory": False, "curriculum_threshold": 0.5, "curriculum_window": 2, **over})


def test_a_run_draws_the_easy_stage_until_its_reward_reaches_the_threshold(tmp_path):
    from grpo_seq.jobs.lm import run_lm_job

    seen: list[set] = []

    def right_on_easy(prompts, completions, **_):  # every easy prompt earns 1, every hard one 0
        seen.append({p.split()[0] for p in prompts})
        return [float(p.startswith("easy")) for p in prompts]

    run_lm_job(_staged_job(tmp_path), reward_funcs=[right_on_easy])
    assert seen == [{"easy"}, {"easy"}, {"hard"}, {"hard"}]
    stages = [json.loads(line)["curriculum/stage"] for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert stages == [0, 0, 1, 1]  # each step logs the stage it drew from


def test_rows_without_a_stage_are_refused_before_the_model_loads(tmp_path, capsys):
    from grpo_seq.cli import cli_errors
    from grpo_seq.jobs.lm import run_lm_job

    spec = _staged_job(tmp_path, model=str(tmp_path / "no-such-model"))
    (tmp_path / "data.jsonl").write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    with pytest.raises(SystemExit) as e, cli_errors():
        run_lm_job(spec, reward_funcs=[lambda completions, **_: [0.0] * len(completions)])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: --curriculum_threshold: the rows of --dataset {tmp_path}/data.jsonl have no 'stage' column (a number "
        "per row, lower is easier) to draw them by")


def test_a_resumed_run_draws_from_the_stage_it_had_reached(tmp_path):
    from grpo_seq.jobs.lm import run_lm_job

    seen: list[set] = []

    def right_on_easy(prompts, completions, **_):
        seen.append({p.split()[0] for p in prompts})
        return [float(p.startswith("easy")) for p in prompts]

    run_lm_job(_staged_job(tmp_path, max_steps=2, save_steps=1), reward_funcs=[right_on_easy])
    assert seen == [{"easy"}, {"easy"}]  # stage 1 opened after the second step, then the run ended
    run_lm_job(_staged_job(tmp_path, max_steps=3, resume_from=str(tmp_path / "run")), reward_funcs=[right_on_easy])
    assert seen[2:] == [{"hard"}]
