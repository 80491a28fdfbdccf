"""atomic_dir and atomic_file: the old folder (file) or the complete new one, never half of one."""

import pytest

from grpo_seq.serialization import atomic_dir, atomic_file, atomic_write_text


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


def test_a_failed_file_write_leaves_the_old_file_untouched(tmp_path):
    target = tmp_path / "sub" / "eval.json"
    assert atomic_write_text(target, "old") == target and target.read_text() == "old"
    with pytest.raises(RuntimeError):
        with atomic_file(target) as tmp:
            tmp.write_bytes(b"new, half")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old"
    assert [p.name for p in target.parent.iterdir()] == ["eval.json"]  # no temporary file left
    with atomic_file(target) as tmp:
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new"
