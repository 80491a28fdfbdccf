"""atomic_dir and atomic_file: the old folder (file) or the complete new one, never half of one, and
never none (a folder replaced by one atomic exchange); a writer's own word for a full disk or an
oversized file (torch.save's, safetensors') leaves them as OSError ENOSPC or EFBIG."""

import errno
import os
import sys
import textwrap

import pytest
from safetensors import SafetensorError

import grpo_seq.io.serialization as ser
from grpo_seq.io.serialization import atomic_dir, atomic_file, atomic_write_text, save_policy
import forkrun  # tests/forkrun.py: Python programs forked from a warm process


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


# -- replacing a folder: never a moment without it ---------------------------------------------------

def _publish_watching(monkeypatch, target):
    """Record, around every rename and exchange atomic_dir makes, whether ``target`` exists."""
    seen, real_replace, real_exchange = [], os.replace, ser._exchange

    def replace(src, dst, *args, **kwargs):
        seen.append(("replace", target.exists()))
        real_replace(src, dst, *args, **kwargs)
        seen.append(("replace", target.exists()))

    def exchange(a, b):
        seen.append(("exchange", target.exists()))
        done = real_exchange(a, b)
        seen.append(("exchange" if done else "refused", target.exists()))
        return done

    monkeypatch.setattr(ser.os, "replace", replace)
    monkeypatch.setattr(ser, "_exchange", exchange)
    return seen


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_a_folder_is_replaced_by_an_atomic_exchange_and_never_missing(tmp_path, monkeypatch):
    target = tmp_path / "policy"
    with atomic_dir(target) as tmp:
        (tmp / "w.txt").write_text("old")
        (tmp / "only_old.txt").write_text("x")
    seen = _publish_watching(monkeypatch, target)
    with atomic_dir(target) as tmp:
        (tmp / "w.txt").write_text("new")
    assert seen == [("exchange", True), ("exchange", True)]  # one step, no rename: never missing
    assert (target / "w.txt").read_text() == "new" and not (target / "only_old.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["policy"]  # the old one, swapped out, is removed


def test_where_the_exchange_is_refused_two_renames_replace_the_folder(tmp_path, monkeypatch):
    target = tmp_path / "policy"
    with atomic_dir(target) as tmp:
        (tmp / "w.txt").write_text("old")
    monkeypatch.setattr(ser, "_renameat2", lambda: None)  # another OS, or no renameat2 in libc
    seen = _publish_watching(monkeypatch, target)
    with atomic_dir(target) as tmp:
        (tmp / "w.txt").write_text("new")
    assert [kind for kind, _ in seen] == ["exchange", "refused", "replace", "replace", "replace", "replace"]
    assert ("replace", False) in seen  # the moment between the renames the exchange avoids
    assert (target / "w.txt").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["policy"]


def test_a_filesystem_refusing_the_exchange_falls_back_to_renames(tmp_path, monkeypatch):
    target = tmp_path / "policy"
    with atomic_dir(target) as tmp:
        (tmp / "w.txt").write_text("old")

    def einval(*args):  # what a filesystem without RENAME_EXCHANGE answers
        import ctypes

        ctypes.set_errno(errno.EINVAL)
        return -1

    monkeypatch.setattr(ser, "_renameat2", lambda: einval)
    with atomic_dir(target) as tmp:
        (tmp / "w.txt").write_text("new")
    assert (target / "w.txt").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["policy"]


# -- a writer's own words for a full disk ------------------------------------------------------------

TORCH_FULL = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
SAFETENSORS_FULL = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


@pytest.mark.parametrize("raised", [TORCH_FULL, SAFETENSORS_FULL, OSError(errno.ENOSPC, "No space left on device")],
                         ids=["torch.save", "safetensors", "python"])
def test_a_full_disk_leaves_atomic_dir_as_enospc_naming_the_folder(tmp_path, raised):
    target = tmp_path / "ckpt"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("old")
    with pytest.raises(OSError) as info:
        with atomic_dir(target) as tmp:
            (tmp / "a.txt").write_text("new")
            raise raised
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert (target / "a.txt").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_a_full_disk_in_a_nested_write_names_the_final_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(ser, "save_file", lambda *a, **k: (_ for _ in ()).throw(SAFETENSORS_FULL))
    target = tmp_path / "ckpt"
    with pytest.raises(OSError) as info:
        with atomic_dir(target) as tmp:
            save_policy(_mlp(), tmp / "policy")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target / "policy")
    assert list(tmp_path.iterdir()) == []


def test_other_writer_errors_keep_their_own_type(tmp_path):
    with pytest.raises(RuntimeError, match="a bug"):
        with atomic_dir(tmp_path / "x"):
            raise RuntimeError("a bug")
    with pytest.raises(SafetensorError, match="invalid"):
        with atomic_file(tmp_path / "y"):
            raise SafetensorError("Error while serializing: invalid tensor")


def _mlp():
    from grpo_seq.policies import CategoricalMLPPolicy

    return CategoricalMLPPolicy(obs_dim=4, num_actions=2, hidden_sizes=(8,))


EFBIG_SCRIPT = textwrap.dedent("""
    import errno, resource, sys
    import torch
    from grpo_seq.io.serialization import atomic_dir
    resource.setrlimit(resource.RLIMIT_FSIZE, (20000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    try:
        with atomic_dir(sys.argv[1]) as tmp:
            (tmp / "small.txt").write_text("x")
            torch.save({"w": torch.zeros(100000)}, tmp / sys.argv[2])
    except OSError as e:
        print(errno.errorcode[e.errno], e.filename)
""")


def test_a_file_over_the_size_limit_is_efbig_naming_the_file(tmp_path):
    # torch.save's zip writer says only "unexpected pos"; the file stopped at the limit tells EFBIG
    name = "optimizer.pt"
    # a process of its own (the limit stays there), forked from the warm server
    out = forkrun.run([sys.executable, "-c", EFBIG_SCRIPT, str(tmp_path / "ckpt"), name], timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["EFBIG", str(tmp_path / "ckpt" / name)]
    assert list(tmp_path.iterdir()) == []


def test_an_atomic_file_has_the_mode_open_would_give_it(tmp_path):
    import stat

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "config.json", "{}")
        (tmp_path / "plain.json").write_text("{}")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "config.json").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == 0o644  # not mkstemp's 0600
