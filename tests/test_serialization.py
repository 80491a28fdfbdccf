"""atomic_dir: the old folder or the complete new one, never half of one."""

import pytest

from grpo_seq.serialization import atomic_dir


def test_a_failed_write_leaves_the_old_folder_untouched(tmp_path):
    target = tmp_path / "out"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as tmp:
            (tmp / "a.txt").write_text("new")
            raise RuntimeError("killed mid-write")
    assert (target / "a.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary folder left


def test_finish_runs_before_the_rename_and_its_failure_keeps_the_old(tmp_path):
    target = tmp_path / "out"
    seen = []
    with atomic_dir(target, finish=lambda tmp: seen.append(sorted(p.name for p in tmp.iterdir()))) as tmp:
        (tmp / "a.txt").write_text("1")
    assert seen == [["a.txt"]] and (target / "a.txt").read_text() == "1"

    def fail(tmp):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        with atomic_dir(target, finish=fail) as tmp:
            (tmp / "a.txt").write_text("2")
    assert (target / "a.txt").read_text() == "1"
