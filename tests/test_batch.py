"""RolloutBatch: every field checked on construction, minibatches included."""

import pytest
import torch

from grpo_seq.math.batch import RolloutBatch, TextSamples


def batch(**kw):
    args = dict(context=torch.zeros(4, 3, 2), tokens=torch.zeros(4, 3, dtype=torch.long),
                mask=torch.ones(4, 3, dtype=torch.bool), group=torch.tensor([0, 0, 1, 1]), num_generations=2,
                rewards=torch.tensor([1.0, 2.0, 3.0, 4.0]))
    args.update(kw)
    return RolloutBatch(**args)


@pytest.mark.parametrize("field, value, message", [
    ("mask", torch.ones(4, 2, dtype=torch.bool), r"RolloutBatch.mask is shaped \(4, 2\); expected \(4, 3\)"),
    ("rewards", torch.zeros(3), r"RolloutBatch.rewards is shaped \(3,\); expected \(4,\)"),
    ("advantages", torch.zeros(4, 4), r"RolloutBatch.advantages is shaped \(4, 4\)"),
    ("prompt_mask", torch.ones(2, 5), r"RolloutBatch.prompt_mask is shaped \(2, 5\); expected \(4,\)"),
    ("num_generations", 1, "num_generations must be >= 2"),
    ("num_generations", 3, "batch of 4 outputs is not divisible by num_generations 3"),
])
def test_a_field_of_the_wrong_shape_is_named(field, value, message):
    with pytest.raises(ValueError, match=message):
        batch(**{field: value})


def test_select_keeps_rows_in_order_and_is_checked():
    text = TextSamples(prompts=["a", "a", "b", "b"], prompt_texts=["A", "A", "B", "B"], completions=["1", "2", "3", "4"],
                       completion_texts=["1", "2", "3", "4"], completion_ids=[[1], [2], [3], [4]],
                       columns={"answer": ["x", "x", "y", "y"]})
    b = batch(text=text, advantages=torch.arange(12.0).reshape(4, 3), metrics={"m": 1.0})
    sub = b.select(torch.tensor([3, 0, 1]))  # 3 rows: not whole groups, allowed for a minibatch
    assert sub.partial and sub.batch_size == 3
    assert sub.rewards.tolist() == [4.0, 1.0, 2.0]
    assert sub.advantages[0].tolist() == [9.0, 10.0, 11.0]
    assert sub.text.completions == ["4", "1", "2"] and sub.text.columns == {"answer": ["y", "x", "x"]}
    assert sub.metrics == {"m": 1.0}
    # the minibatch is validated like any batch: a bad field set on it later is caught on the next copy
    with pytest.raises(ValueError, match="RolloutBatch.rewards"):
        RolloutBatch(**{**sub.__dict__, "rewards": torch.zeros(4)})


def test_text_lists_must_match_the_batch():
    text = TextSamples(prompts=["a"] * 4, prompt_texts=["a"] * 4, completions=["c"] * 3, completion_texts=["c"] * 4,
                       completion_ids=[[1]] * 4)
    with pytest.raises(ValueError, match="TextSamples.completions has 3 entries for a batch of 4"):
        batch(text=text)
