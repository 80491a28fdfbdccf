"""SignalWatch: a run whose groups are all flat is called out once, with the ways out."""

from grpo_seq.diagnostics import SignalWatch


def test_flat_steps_in_a_row_trigger_one_message():
    watch = SignalWatch(patience=3, threshold=0.9)
    assert [watch.update(x) for x in (1.0, 0.95, 0.5, 1.0, 1.0)] == [None] * 5  # the 0.5 step resets the count
    message = watch.update(0.9)
    assert message.startswith("no learning signal: for 3 steps in a row at least 90% of the groups")
    assert "--num_generations" in message and "--exploration_bonus" in message
    assert watch.update(1.0) is None  # said once
    assert (watch.flat_in_a_row, watch.flat_total) == (4, 6)
