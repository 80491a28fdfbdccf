"""SignalWatch: a run whose groups are all flat is called out once, with the ways out; a tie at
the top (a solved task) is not."""

from grpo_seq.loop.diagnostics import SignalWatch

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
