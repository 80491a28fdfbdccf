"""SignalWatch: a run whose groups are all flat is called out once, with the ways out; a tie at
the top (a solved task) is not."""

import torch

from grpo_seq.loop.diagnostics import SignalWatch, identical_groups

FLAT = [[-500.0, -500.0], [-500.0, -500.0]]


def test_flat_steps_in_a_row_trigger_one_message():
    watch = SignalWatch(patience=3, threshold=0.9)
    steps = [FLAT, FLAT, [[-500.0, -480.0], [-500.0, -500.0]], FLAT, FLAT]  # the third step has a signal
    assert [watch.update(s) for s in steps] == [None] * 5
    message = watch.update(FLAT)  # flat, and below the best seen (-480)
    assert message.startswith("no learning signal: for 3 steps in a row at least 90% of the groups")
    assert "--num_generations" in message and "--exploration_bonus" in message
    assert watch.update(FLAT) is None  # said once
    assert (watch.flat_in_a_row, watch.flat_total) == (4, 6)


def test_a_run_that_never_differed_is_flat_even_at_its_best():
    watch = SignalWatch(patience=2)
    watch.update(FLAT)
    assert watch.update(FLAT) is not None


def test_a_tie_at_the_best_reward_seen_is_not_flat():
    watch = SignalWatch(patience=2)
    watch.update([[12.0, 500.0]])
    assert [watch.update([[500.0, 500.0]]) for _ in range(5)] == [None] * 5  # solved: every member at the best
    assert watch.flat_in_a_row == 0


def test_a_group_whose_members_all_did_the_same_is_settled_not_stuck():
    watch = SignalWatch(patience=2)
    watch.update([[12.0, 500.0], [3.0, 4.0]])
    # a settled policy: each group's members played the same actions, so they tie below the best seen
    assert [watch.update([[20.0, 20.0], [7.0, 7.0]], identical=[True, True]) for _ in range(5)] == [None] * 5
    assert watch.flat_in_a_row == 0
    # the same ties from members that acted differently: no signal
    assert watch.update([[20.0, 20.0], [7.0, 7.0]], identical=[False, False]) is None
    assert watch.update([[20.0, 20.0], [7.0, 7.0]], identical=[False, False]).startswith("no learning signal")


def test_identical_groups_compare_members_on_their_masked_tokens():
    tokens = torch.tensor([[1, 2, 9], [1, 2, 5],   # equal where masked (the 9 and 5 are padding)
                           [1, 2, 3], [1, 4, 3],   # a different second action
                           [1, 2, 0], [1, 2, 3]])  # the same prefix, one member ran a step longer
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert identical_groups(tokens, mask, 2).tolist() == [True, False, False]
