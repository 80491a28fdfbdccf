"""Reward functions and the scorer, against hand-worked values."""

import functools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from grpo_seq.math.batch import RolloutBatch, TextSamples
from grpo_seq.scoring.rewards import RewardFunctionError, RewardScorer, load_reward_fn, reward_name
from reward_fns import (
    REGISTRY,
    completion_text,
    correctness_reward,
    extract_answer,
    format_reward,
    has_answer_line,
    normalize_number,
    overlong_penalty,
)

# ---------------------------------------------------------------- answer extraction


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is\n#### 1,234.", "1234"),
        ("#### $18", "18"),
        ("#### 18", "18"),
        ("####18", "18"),
        ("first try\n#### 5\nno wait\n#### 7", "7"),
        ("so the total is \\boxed{42}.", "42"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{3}{4}}", "3/4"),
        ("\\boxed{\\text{18}}", "18"),
        ("#### 3.50", "3.50"),
        ("#### -5", "-5"),
        ("#### -1,250.75", "-1250.75"),
        ("#### $-3", "-3"),
        ("#### 3/4", "3/4"),
        ("#### 1,234,567", "1234567"),
        ("#### 12 \nmore text", "12"),
        # A #### line takes precedence over \boxed, even when both are present.
        ("\\boxed{9}\n#### 10", "10"),
        ("The answer is 42.", None),
        ("", None),
        ("#### abc", None),
        ("#### 18 dollars", None),
        ("#### 3,4", None),  # a list, not 34
        ("#### 1/0", None),
        ("####", None),
        ("\\boxed{x+1}", None),
        ("\\boxed{42", None),  # unbalanced
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_decimal_is_numerically_equal():
    assert Fraction(extract_answer("#### 3.50")) == Fraction("3.5")


@pytest.mark.parametrize(
    "s, expected",
    [(" $1,234. ", "1234"), ("18.", "18"), ("+7", "7"), ("\u22124", "-4"), ("1\\,000", "1000"), ("0.5", "0.5"), (".5", ".5"), ("1e3", None), ("", None), ("$", None)],
)
def test_normalize_number(s, expected):
    assert normalize_number(s) == expected


def test_completion_text():
    assert completion_text("abc") == "abc"
    assert completion_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]) == "a"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}]) == "xy"
    assert completion_text([]) == ""
    with pytest.raises(TypeError, match="completion must be a str"):
        completion_text(42)


# ---------------------------------------------------------------- gsm8k rewards


GOLD_RAW = "Natalia sold 48 clips in April and half as many in May.\n48 + 24 = 72\n#### 72"


def test_correctness_on_strings_with_bare_gold():
    completions = ["#### 18", "#### 18.0", "#### $18", "#### 18.", "#### 17", "no answer", "\\boxed{18}"]
    got = correctness_reward(prompts=["q"] * 7, completions=completions, answer=["18"] * 7)
    assert got == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0]


def test_correctness_on_conversations_with_raw_gsm8k_gold():
    def msg(text):
        return [{"role": "assistant", "content": text}]

    completions = [msg("48/2 = 24, 48 + 24 = 72\n#### 72"), msg("#### 70"), msg("\\boxed{72}")]
    got = correctness_reward(prompts=[[{"role": "user", "content": "q"}]] * 3, completions=completions, answer=[GOLD_RAW] * 3)
    assert got == [1.0, 0.0, 1.0]


def test_correctness_thousands_separators_and_int_gold():
    got = correctness_reward(None, ["#### 1,800", "#### 1800", "#### 18,00"], answer=["reasoning\n#### 1800", 1800, "1,800"])
    assert got == [1.0, 1.0, 0.0]


def test_correctness_errors():
    with pytest.raises(ValueError, match="column 'answer'"):
        correctness_reward(["q"], ["#### 1"])
    with pytest.raises(ValueError, match="got 2 gold answers for 1 completions"):
        correctness_reward(["q"], ["#### 1"], answer=["1", "2"])
    with pytest.raises(ValueError, match="gold answer 'n/a'"):
        correctness_reward(["q"], ["#### 1"], answer=["n/a"])


def test_format_reward_values():
    completions = [
        "6 x 7 = 42\n#### 42",  # 1.0: working, then the only #### line, and the last line
        "6 x 7 = 42\n  #### $1,234.  \n\n",  # 1.0: the line holds only the number; blank lines after are fine
        "6 x 7 = 42\n#### 42\nThe answer is: 42",  # 0.5: the answer line is not the last
        "#### 41\n#### 42",  # 0.0: several #### lines (a model repeating them until cut off)
        "#### 42\n#### 42\n#### 42\n####",  # 0.0: the same, cut off mid-line
        "the #### 42 is inline",  # not line-anchored; no boxed -> 0.0
        "6 x 7, so \\boxed{42}",  # 0.5: boxed after working
        "#### forty-two\n\\boxed{42}",  # a #### line that is no number: 0.0, boxed or not
        "\\boxed{x}",  # 0.0
        "42",  # 0.0
        [{"role": "assistant", "content": "#### 7"}],  # 0.0: no working (the shortcut a run collapsed to)
        "work\n#### 42",  # 0.0: words, but no number before the answer
        [{"role": "assistant", "content": "3 + 4 = 7\n#### 7"}],  # 1.0
        "\\boxed{42}",  # 0.0: boxed with no working
    ]
    assert format_reward(prompts=None, completions=completions) == [
        1.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert [has_answer_line(c) for c in completions] == [
        True, True, True, True, True, False, False, False, False, False, True, True, True, False]


def test_overlong_penalty_boundaries():
    # max 10, buffer 4: no penalty up to 6 tokens, then (6 - L) / 4, -1 from 10 on.
    fn = overlong_penalty(max_length=10, buffer=4)
    assert fn.__name__ == "overlong_penalty"
    ids = [[0] * n for n in (0, 6, 7, 8, 9, 10, 12)]
    assert fn(prompts=None, completions=None, completion_ids=ids) == [0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0]


def test_overlong_penalty_buffer_equal_to_max_length():
    fn = overlong_penalty(max_length=4, buffer=4)
    assert fn(completions=None, completion_ids=[[], [1], [1, 2], [1] * 4]) == [0.0, -0.25, -0.5, -1.0]


def test_overlong_penalty_needs_completion_ids():
    with pytest.raises(TypeError, match="completion_ids"):
        overlong_penalty(10, 4)(prompts=["q"], completions=["a"])


@pytest.mark.parametrize("max_length, buffer", [(10, 0), (10, 11), (10, -1), (0, 1), (10, 2.0)])
def test_overlong_penalty_validates(max_length, buffer):
    with pytest.raises(ValueError):
        overlong_penalty(max_length, buffer)


# ---------------------------------------------------------------- loading


def test_load_by_short_name_and_registry():
    assert REGISTRY == {"correctness": correctness_reward, "format": format_reward}
    assert load_reward_fn("correctness", REGISTRY) is correctness_reward
    assert load_reward_fn(" format ", registry=REGISTRY) is format_reward


def test_a_short_name_needs_the_callers_registry():
    with pytest.raises(ValueError, match="'correctness' is a short name, and short names need a registry"):
        load_reward_fn("correctness")
    assert load_reward_fn("reward_fns.gsm8k:correctness_reward") is correctness_reward  # paths need none


def test_load_by_import_path():
    assert load_reward_fn("reward_fns.gsm8k:format_reward") is format_reward
    assert load_reward_fn("reward_fns.gsm8k.format_reward") is format_reward


def test_load_callable_is_returned_as_is():
    fn = overlong_penalty(10, 4)
    assert load_reward_fn(fn) is fn


def test_load_user_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards_mod.py").write_text(
        "def my_fn(completions, **kwargs):\n    return [float(len(c)) for c in completions]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = load_reward_fn("my_rewards_mod:my_fn")
    assert fn(prompts=["p", "p"], completions=["ab", "abcd"]) == [2.0, 4.0]
    assert load_reward_fn("my_rewards_mod.my_fn") is fn


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("nope", "unknown reward function 'nope'"),
        ("no_such_module_xyz:fn", "no module named 'no_such_module_xyz'"),
        ("reward_fns.gsm8k:missing", "has no attribute 'missing'"),
        ("reward_fns.gsm8k.missing", "has no attribute 'missing'"),
        ("reward_fns.gsm8k:__doc__", "is not callable"),
        ("reward_fns.gsm8k:overlong_penalty", "does not accept the keyword argument(s) prompts, completions"),
    ],
)
def test_load_errors_name_spec_and_short_names(spec, fragment):
    with pytest.raises(ValueError) as info:
        load_reward_fn(spec, REGISTRY)
    msg = str(info.value)
    assert fragment in msg
    assert repr(spec) in msg
    if "accept" not in fragment:
        assert "correctness, format" in msg


def test_load_reports_broken_user_module(tmp_path, monkeypatch):
    (tmp_path / "broken_rewards_mod.py").write_text("import not_installed_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="importing 'broken_rewards_mod' failed: ModuleNotFoundError"):
        load_reward_fn("broken_rewards_mod:fn")


def test_reward_name():
    class Scorer:
        def __call__(self, prompts, completions, **kwargs):
            return [0.0] * len(completions)

    assert reward_name(format_reward) == "format_reward"
    assert reward_name(functools.partial(format_reward, prompts=None)) == "format_reward"
    assert reward_name(Scorer()) == "Scorer"


# ---------------------------------------------------------------- scorer


def make_batch(prompts=("p0", "p0", "p1", "p1"), completions=("a", "bb", "ccc", "dddd"), completion_ids=None,
               columns=None, metrics=None):
    text = TextSamples(prompts=list(prompts), prompt_texts=list(prompts), completions=list(completions),
                       completion_texts=list(completions), completion_ids=completion_ids or [[0]] * 4,
                       columns=columns or {})
    return RolloutBatch(
        context=torch.zeros(4, 1, dtype=torch.long),
        tokens=torch.zeros(4, 3, dtype=torch.long),
        mask=torch.ones(4, 3, dtype=torch.bool),
        group=torch.tensor([0, 0, 1, 1]),
        num_generations=2,
        rewards=torch.zeros(4),
        text=text,
        metrics=metrics or {},
    )


def constant(values, name="const"):
    def fn(prompts, completions, **kwargs):
        return list(values)

    fn.__name__ = name
    return fn


def test_scorer_weighted_sum_components_and_metrics():
    f1 = constant([1.0, 0.0, 1.0, 0.0], "f1")
    f2 = constant([2.0, None, 4.0, 1.0], "f2")
    batch = RewardScorer([f1, f2], weights=[1.0, 0.5])(make_batch())
    # totals: 1 + 0.5*2 = 2; 0 (f2 does not apply); 1 + 0.5*4 = 3; 0 + 0.5*1 = 0.5
    assert batch.rewards.tolist() == [2.0, 0.0, 3.0, 0.5]
    assert batch.rewards.dtype == torch.float32
    comp = batch.reward_components
    assert comp.shape == (4, 2) and comp.dtype == torch.float32
    assert comp[:, 0].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert comp[0, 1] == 2.0 and math.isnan(comp[1, 1]) and comp[2:, 1].tolist() == [4.0, 1.0]
    # unweighted means over the samples each scored: f1 2/4; f2 (2 + 4 + 1) / 3
    assert batch.metrics == {"reward/f1": 0.5, "reward/f2": pytest.approx(7 / 3)}


def test_scorer_sample_scored_by_no_function_is_zero():
    batch = RewardScorer([constant([None, 1.0, 1.0, 1.0]), constant([None, 2.0, 2.0, 2.0])])(make_batch())
    assert batch.rewards.tolist() == [0.0, 3.0, 3.0, 3.0]


def test_a_batch_no_function_scored_stops_the_run_naming_the_functions():
    # one function's None for every sample is fine beside another that scores
    batch = RewardScorer([constant([None] * 4), constant([1.0, 2.0, 3.0, 4.0])])(make_batch())
    assert batch.rewards.tolist() == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(RewardFunctionError, match="reward functions 'const', 'const_2' returned None for all 4 "
                                                  "completions: nothing scored them"):
        RewardScorer([constant([None] * 4), constant([None] * 4)])(make_batch())


def test_scorer_passes_columns_and_completion_ids_and_keeps_metrics():
    seen = {}

    def spy(prompts, completions, completion_ids, answer, **kwargs):
        seen.update(prompts=prompts, completion_ids=completion_ids, answer=answer, rest=kwargs)
        return [float(a) for a in answer]

    ids = [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4]]
    batch = make_batch(completion_ids=ids, columns={"answer": ["1", "2", "3", "4"]}, metrics={"other": 1.0})
    batch = RewardScorer(spy)(batch)
    assert seen == {"prompts": ["p0", "p0", "p1", "p1"], "completion_ids": ids, "answer": ["1", "2", "3", "4"], "rest": {}}
    assert batch.rewards.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert batch.metrics == {"other": 1.0, "reward/spy": 2.5}


def test_scorer_gsm8k_end_to_end():
    completions = ["48 + 24 = 72\n#### 72", "48 + 24 = \\boxed{72}", "4 + 3 = 7\n#### 7", "nothing"]
    batch = make_batch(completions=completions, completion_ids=[[0] * 2, [0] * 7, [0] * 8, [0] * 12], columns={"answer": [GOLD_RAW] * 4})
    scorer = RewardScorer(["correctness", "reward_fns.gsm8k:format_reward", overlong_penalty(10, 4)], weights=[1.0, 0.5, 1.0],
                          registry=REGISTRY)
    assert scorer.names == ["correctness_reward", "format_reward", "overlong_penalty"]
    batch = scorer(batch)
    # correctness [1, 1, 0, 0]; format [1, .5, 1, 0] * 0.5; overlong [0, -.25, -.5, -1]
    assert batch.rewards.tolist() == [1.5, 1.0, 0.0, -1.0]


def test_scorer_accepts_arrays_and_tensors():
    batch = RewardScorer([lambda **kw: np.array([1, 2, 3, 4]), lambda **kw: torch.tensor([0.5] * 4)])(make_batch())
    assert batch.rewards.tolist() == [1.5, 2.5, 3.5, 4.5]
    assert list(batch.metrics) == ["reward/<lambda>", "reward/<lambda>_2"]


def test_scorer_unique_names():
    f = constant([0.0] * 4, "f")
    assert RewardScorer([f, f, functools.partial(f)]).names == ["f", "f_2", "f_3"]


def test_scorer_construction_errors():
    f = constant([0.0] * 4)
    with pytest.raises(ValueError, match="at least one"):
        RewardScorer([])
    with pytest.raises(ValueError, match="got 1 reward weights for 2 reward functions"):
        RewardScorer([f, f], weights=[1.0])
    with pytest.raises(ValueError, match="finite"):
        RewardScorer([f], weights=[float("nan")])
    with pytest.raises(ValueError, match="finite"):
        RewardScorer([f], weights=[float("inf")])
    with pytest.raises(ValueError, match="unknown reward function 'nope'"):
        RewardScorer(["nope"], registry=REGISTRY)


def test_scorer_missing_text():
    with pytest.raises(ValueError, match=r"needs batch.text"):
        RewardScorer(constant([0.0] * 4))(RolloutBatch(
            context=torch.zeros(4, 1), tokens=torch.zeros(4, 3, dtype=torch.long), mask=torch.ones(4, 3, dtype=torch.bool),
            group=torch.tensor([0, 0, 1, 1]), num_generations=2, rewards=torch.zeros(4),
        ))
    with pytest.raises(ValueError, match=r"columns\['answer'\] has 3 entries for a batch of 4"):
        make_batch(columns={"answer": ["1", "2", "3"]})


def broken(prompts, completions, **kwargs):
    raise KeyError("answer")


@pytest.mark.parametrize(
    "fn, fragments",
    [
        (broken, ["reward function 'broken' raised KeyError: 'answer'", "keyword arguments ['completion_ids', 'completions', 'prompts']"]),
        (lambda **kw: "1234", ["reward function '<lambda>' returned str", "list of 4 floats"]),
        (lambda **kw: 7.0, ["reward function '<lambda>' returned float"]),
        (lambda **kw: torch.zeros(4, 1), ["returned a 2-D Tensor of shape (4, 1)"]),
        (constant([1.0, 2.0, 3.0], "short"), ["reward function 'short' returned the wrong number of values: got 3, expected 4"]),
        (constant([1.0, float("nan"), 0.0, 0.0], "nan_fn"), ["reward function 'nan_fn' returned the non-finite value nan at index 1"]),
        (constant([1.0, 0.0, 0.0, float("-inf")], "inf_fn"), ["reward function 'inf_fn' returned the non-finite value -inf at index 3"]),
        (constant([1.0, "0.5", 0.0, 0.0], "str_fn"), ["reward function 'str_fn' returned '0.5' (str) at index 1", "must be a number"]),
    ],
)
def test_scorer_errors_name_function_and_problem(fn, fragments):
    with pytest.raises(RewardFunctionError) as info:
        RewardScorer([fn])(make_batch())
    msg = str(info.value)
    assert msg.startswith("reward function '")
    for fragment in fragments:
        assert fragment in msg


def test_scorer_error_chains_original_exception():
    with pytest.raises(RewardFunctionError) as info:
        RewardScorer([broken])(make_batch())
    assert isinstance(info.value.__cause__, KeyError)
    assert isinstance(info.value, ValueError)


def test_each_function_gets_its_own_copy_of_chat_completions_prompts_and_columns():
    chat = [[{"role": "assistant", "content": c}] for c in ("a", "bb", "ccc", "dddd")]
    ids = [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4]]
    batch = make_batch(completions=chat, completion_ids=ids, columns={"answer": ["1", "2", "3", "4"]})

    def edits(prompts, completions, completion_ids, answer, **kwargs):
        completions[0][0]["content"] = "EDITED"
        completions.append([{"role": "assistant", "content": "extra"}])
        prompts.clear()
        completion_ids[1].append(99)
        answer.reverse()
        return [0.0] * 4

    def sees(prompts, completions, completion_ids, answer, **kwargs):
        intact = (prompts == ["p0", "p0", "p1", "p1"] and [c[0]["content"] for c in completions] == ["a", "bb", "ccc", "dddd"]
                  and completion_ids == ids and answer == ["1", "2", "3", "4"])
        return [1.0 if intact else -1.0] * len(completions)

    batch = RewardScorer([edits, sees])(batch)
    assert batch.metrics["reward/sees"] == 1.0
    assert batch.text.completions == [[{"role": "assistant", "content": c}] for c in ("a", "bb", "ccc", "dddd")]
    assert batch.text.prompts == ["p0", "p0", "p1", "p1"] and batch.text.columns == {"answer": ["1", "2", "3", "4"]}
    assert batch.text.completion_ids == [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4]]


def test_a_function_that_exits_or_raises_keyboard_interrupt_itself_is_named():
    import sys

    def exits(prompts, completions, **kwargs):
        sys.exit(3)

    def interrupts(prompts, completions, **kwargs):
        raise KeyboardInterrupt

    with pytest.raises(RewardFunctionError, match=r"reward function 'exits' called sys.exit\(3\) \(.*test_rewards.py line"):
        RewardScorer([exits])(make_batch())
    with pytest.raises(RewardFunctionError, match="reward function 'interrupts' raised KeyboardInterrupt .* and no Ctrl-C"):
        RewardScorer([interrupts])(make_batch())


def test_a_ctrl_c_during_a_function_still_interrupts():
    import signal

    def pressed(prompts, completions, **kwargs):
        signal.raise_signal(signal.SIGINT)  # Python's default handler: KeyboardInterrupt, as a terminal's Ctrl-C
        return [0.0] * len(completions)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            RewardScorer([pressed])(make_batch())
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the watch put it back
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_function_may_return_none_for_every_sample_as_in_trl():
    # TRL allows it: that function scored nothing, the others score the batch. Totals: 2.0 x 1 each.
    scorer = RewardScorer([constant([None] * 4, "none_fn"), constant([1.0, 2.0, 3.0, 4.0], "len_fn")], [1.0, 2.0])
    batch = scorer(make_batch())
    assert batch.rewards.tolist() == [2.0, 4.0, 6.0, 8.0]
    assert "reward/none_fn" not in batch.metrics and batch.metrics["reward/len_fn"] == 2.5  # (1+2+3+4)/4


def test_async_functions_are_awaited_together_and_extra_keywords_reach_every_function():
    import asyncio

    seen = []

    async def slow(completions, **kwargs):
        seen.append(("slow", kwargs["trainer_state"]))
        await asyncio.sleep(0)  # yields: the other coroutine runs before this one returns
        seen.append("slow done")
        return [1.0] * len(completions)

    async def fast(completions, **kwargs):
        seen.append("fast")
        return [2.0] * len(completions)

    scorer = RewardScorer([slow, fast])
    scorer.extra["trainer_state"] = "state"
    batch = scorer(make_batch())
    assert batch.rewards.tolist() == [3.0] * 4  # 1 + 2
    assert seen == [("slow", "state"), "fast", "slow done"]  # concurrent: fast ran while slow waited
