"""reasoning-gym as a prompt source and its scorers as rewards: grpo_seq/sources/reasoning_gym.py,
reward_fns/reasoning_gym.py, recipes/reasoning_gym.py and ``grpo-seq train-lm --dataset reasoning_gym:TASK``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from grpo_seq.errors import UsageError  # noqa: E402
from grpo_seq.generation.prompts import prompt_texts  # noqa: E402
from grpo_seq.io.prompt_data import check_prompt, prompt_rows, read_rows  # noqa: E402
from grpo_seq.scoring.rewards import RewardScorer  # noqa: E402
from grpo_seq.io.sources.reasoning_gym import HELD_OUT_OFFSET, task_items, task_rows  # noqa: E402
from reward_fns.reasoning_gym import score, task_score  # noqa: E402
from tiny_lm import make_tokenizer, save_tiny_lm  # noqa: E402
import forkrun  # tests/forkrun.py: Python programs forked from a warm process

ROOT = Path(__file__).resolve().parents[2]
EASY = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # few distinct questions: repeats likely


def columns(rows) -> dict:
    return {k: [r[k] for r in rows] for k in ("question", "answer", "metadata")}


@pytest.mark.parametrize("task, options", [("basic_arithmetic", EASY), ("leg_counting", {}), ("spell_backward", {})])
def test_train_and_held_out_items_share_no_question(task, options):
    train = task_items(task, options, "train", seed=3, size=300)
    held_out = task_items(task, options, "test", seed=3, size=300)
    assert len(train) == len(held_out) == 300
    assert not {r["question"] for r in train} & {r["question"] for r in held_out}
    # the held-out generator is another seed, not a filter over the same items
    assert held_out[0]["metadata"]["source_index"] == 0 and held_out[0] != train[0]
    assert task_items(task, options, "train", seed=3, size=300) == train  # a seed repeats its items
    assert HELD_OUT_OFFSET == 1_000_003


def test_a_task_with_few_questions_holds_out_those_it_has_each_once():
    # coin_flip has too few distinct questions for 300 held out beside 300 trained: without a count
    # (grpo-seq eval lm, --eval_dataset) the held-out split is what there is, no question twice
    train = task_items("coin_flip", {}, "train", size=300)
    held_out = task_items("coin_flip", {}, "test", size=300)
    questions = [r["question"] for r in held_out]
    assert 0 < len(held_out) < 300 and len(set(questions)) == len(questions)
    assert not set(questions) & {r["question"] for r in train}


def test_rows_are_chat_prompts_the_sampler_renders():
    rows = read_rows("reasoning_gym:basic_arithmetic", "train", json.dumps({**EASY, "size": 20, "shots": 2}))
    assert len(rows) == 20 and rows.places[0] == "--dataset reasoning_gym:basic_arithmetic (train) item 1"
    prompt = rows[0]["prompt"]
    check_prompt(prompt, "row 1", "prompt")
    assert [m["role"] for m in prompt] == ["user", "assistant", "user", "assistant", "user"]
    assert prompt[-1]["content"].startswith(rows[0]["question"].rstrip())
    assert all(m["content"].startswith("<answer>") for m in prompt[1::2])
    assert rows[0]["question"] not in (prompt[0]["content"], prompt[2]["content"])  # examples are other items
    with_system = prompt_rows(rows, system_prompt="Be brief.")
    assert with_system[0]["prompt"][0] == {"role": "system", "content": "Be brief."}
    texts, _ = prompt_texts(make_tokenizer(), [r["prompt"] for r in with_system[:2]])
    assert texts[0].endswith("<|im_start|>assistant\n") and "<answer>" in texts[0]


def test_the_task_scorer_gives_a_right_answer_1_and_a_wrong_one_0():
    rows = task_items("basic_arithmetic", EASY, "test", seed=0, size=50, count=3)
    right = [f"Let me see.\n<answer>{r['answer']}</answer>" for r in rows]
    wrong = ["<answer>twelve</answer>"] * 3  # basic_arithmetic gives partial credit to an answer containing the gold
    untagged = [r["answer"] for r in rows]
    for fn in (score, task_score("basic_arithmetic", EASY)):
        assert fn(completions=right, **columns(rows)) == [1.0] * 3
        assert fn(completions=wrong, **columns(rows)) == [0.0] * 3
        assert fn(completions=untagged, **columns(rows)) == [0.0] * 3
    chat = [[{"role": "assistant", "content": c}] for c in right]
    scorer = RewardScorer([task_score("basic_arithmetic", EASY)])
    assert scorer.score(["q"] * 3, chat, columns(rows))[0] == [1.0] * 3 and scorer.names == ["basic_arithmetic"]


def test_partial_credit_off_keeps_only_full_marks():
    rows = task_items("letter_counting", {}, "test", seed=0, size=50, count=1)
    gold = rows[0]["answer"]
    padded = [f"<answer>{gold}0.5</answer>"]  # contains the gold answer: letter_counting credits len(gold) / len(answer)
    partial = len(gold) / len(gold + "0.5")
    assert task_score("letter_counting")(completions=padded, **columns(rows)) == [pytest.approx(partial)]
    assert task_score("letter_counting", partial_credit=False)(completions=padded, **columns(rows)) == [0.0]
    right = [f"<answer>{gold}</answer>"]
    assert task_score("letter_counting", partial_credit=False)(completions=right, **columns(rows)) == [1.0]


def test_bad_tasks_and_options_are_one_line_naming_them():
    with pytest.raises(UsageError, match=r"--task: no reasoning-gym task 'leg_countin' \(did you mean leg_counting"):
        task_score("leg_countin")
    with pytest.raises(UsageError, match="no reasoning-gym task 'nope'; tasks include basic_arithmetic, chain_sum"):
        read_rows("reasoning_gym:nope")
    with pytest.raises(UsageError, match="--dataset_config: reasoning-gym task chain_sum has no option.s. max_term; "
                                         "its options: allow_negation, max_digits"):
        read_rows("reasoning_gym:chain_sum", config='{"max_term": 3}')
    with pytest.raises(UsageError, match="--dataset_config: not valid JSON"):
        read_rows("reasoning_gym:chain_sum", config="{max_terms: 3}")
    with pytest.raises(UsageError, match=r"--dataset_config: reasoning-gym task knights_knaves generates no item with "
                                         r'\{"n_people": 2, "depth_constraint": 2, "width_constraint": 1\} \(ValueError: '):
        read_rows("reasoning_gym:knights_knaves", config='{"width_constraint": 1, "size": 2}')
    with pytest.raises(UsageError, match="only .* of 300 held-out questions"):
        task_items("coin_flip", {}, "test", size=300, count=300)
    with pytest.raises(ValueError, match="'metadata' naming its 'source_dataset'"):
        RewardScorer([score]).check_dataset([{"prompt": "q", "answer": "1"}])


def test_stages_are_rows_of_easier_options_before_the_options_own_and_none_is_held_out():
    target, easy = {"max_n": 3, "max_rotations": 0}, {"max_n": 2, "max_rotations": 0}
    config = {**target, "seed": 1, "size": 30, "shots": 1}
    rows = read_rows("reasoning_gym:rotate_matrix", "train", json.dumps({**config, "stages": [easy]}))
    assert [r["stage"] for r in rows] == [0] * 30 + [1] * 30
    assert [r["question"] for r in rows[:30]] == [it["question"] for it in task_items("rotate_matrix", easy, seed=1, size=30)]
    assert rows.places[30] == "--dataset reasoning_gym:rotate_matrix (train, stage 1) item 1"
    assert all(r["prompt"][0]["content"] in {x["prompt"][-1]["content"] for x in rows[:30]} for r in rows[:30])  # own stage's examples
    held_out = read_rows("reasoning_gym:rotate_matrix", "test", json.dumps({**config, "stages": [easy]}))
    assert "stage" not in held_out[0] and not {r["question"] for r in held_out} & {r["question"] for r in rows}
    with pytest.raises(UsageError, match="--dataset_config: stages must be a list of the task's options"):
        read_rows("reasoning_gym:rotate_matrix", config=json.dumps({"stages": {"max_n": 2}}))
    with pytest.raises(UsageError, match="--dataset_config: a stage gives the task's options only"):
        read_rows("reasoning_gym:rotate_matrix", config=json.dumps({"stages": [{"seed": 2}]}))


def run(args: list[str], cwd: Path = ROOT, quick: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1",
           **({"GRPO_SEQ_QUICK": "1"} if quick else {})}
    return forkrun.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return save_tiny_lm(tmp_path_factory.mktemp("tiny") / "model")


def test_the_recipe_trains_a_step_and_scores_held_out_items(tmp_path, tiny_model):
    out = tmp_path / "run"
    res = run(["recipes/reasoning_gym.py", "--model", str(tiny_model), "--task", "basic_arithmetic",
               "--task_options", json.dumps(EASY), "--task_size", "50", "--output_dir", str(out)])
    assert res.returncode == 0, res.stderr[-3000:]
    for name in ("config.json", "metrics.jsonl", "summary.json", "model", "eval_heldout/eval.json",
                 "eval_heldout/base.jsonl", "eval_heldout/trained.jsonl"):
        assert (out / name).exists(), name
    config = json.loads((out / "config.json").read_text())
    assert config["dataset"] == "reasoning_gym:basic_arithmetic"
    assert json.loads(config["dataset_config"]) == {**EASY, "seed": 0, "size": 50, "shots": 1}
    assert "reward/basic_arithmetic" in json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    held_out = json.loads((out / "eval_heldout" / "eval.json").read_text())
    assert held_out["n"] == 2 and held_out["metric"] == "basic_arithmetic"  # GRPO_SEQ_QUICK: 2 items
    assert {"base", "trained", "trained_minus_base", "best_constant", "trained_minus_constant"} <= set(held_out)
    assert json.loads((out / "summary.json").read_text())["heldout"] == held_out
    assert res.stdout.strip().splitlines()[-1].startswith("held-out, 2 items (basic_arithmetic): base ")
    bad = run(["recipes/reasoning_gym.py", "--model", str(tiny_model), "--task", "leg_countin"])
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [bad.stderr.strip()]
    assert bad.stderr.startswith("error: --task: no reasoning-gym task 'leg_countin' (did you mean leg_counting")


def test_the_recipe_draws_its_curriculum_stage_by_stage(tmp_path, tiny_model):
    out = tmp_path / "run"
    hard = {**EASY, "max_terms": 3, "min_terms": 3}
    res = run(["recipes/reasoning_gym.py", "--model", str(tiny_model), "--task", "basic_arithmetic", "--task_options",
               json.dumps(hard), "--curriculum", json.dumps([EASY]), "--curriculum_threshold", "0",
               "--curriculum_window", "1", "--task_size", "20", "--max_steps", "2", "--eval_size", "0",
               "--max_completion_length", "4", "--output_dir", str(out)], quick=False)
    assert res.returncode == 0, res.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["curriculum/stage"] for m in steps] == [0, 1]  # threshold 0: the first step's mean opens stage 1
    assert "curriculum: stage 1 (2 of 2) from step 2" in res.stdout + res.stderr
    assert json.loads(json.loads((out / "config.json").read_text())["dataset_config"])["stages"] == [EASY]
    bad = run(["recipes/reasoning_gym.py", "--model", str(tiny_model), "--curriculum", json.dumps([EASY])])
    assert bad.returncode == 2 and bad.stderr.strip() == (
        f"error: --curriculum: give --curriculum_threshold too: the mean reward that opens the next stage, got "
        f"{json.dumps([EASY])!r}")


def test_train_lm_takes_a_task_as_its_dataset(tmp_path, tiny_model):
    out = tmp_path / "run"
    res = run(["-m", "grpo_seq.cli.commands", "train-lm", "--model", str(tiny_model),
               "--dataset", "reasoning_gym:basic_arithmetic", "--dataset_config", json.dumps({**EASY, "size": 30}),
               "--reward_funcs", "reward_fns.reasoning_gym:score", "--output_dir", str(out)])
    assert res.returncode == 0, res.stderr[-3000:]
    assert "reward/score" in json.loads((out / "metrics.jsonl").read_text().splitlines()[0])


def test_the_recipe_on_sys_path_does_not_hide_the_package():
    """recipes/reasoning_gym.py has the package's name: found first on sys.path, it hands the name over."""
    code = ("import sys; sys.path.insert(0, 'recipes'); import reasoning_gym; "
            "from reasoning_gym.factory import DATASETS; print(reasoning_gym.__file__, len(DATASETS))")
    res = run(["-c", code])
    assert res.returncode == 0, res.stderr[-2000:]
    path, count = res.stdout.split()
    assert not path.startswith(str(ROOT / "recipes")) and int(count) > 100
