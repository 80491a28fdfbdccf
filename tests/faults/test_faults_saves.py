"""Faults around what runs save: ``--overwrite`` deletes only what the old run wrote (read from
its config.json's kind), and a saved model that is damaged, of another format version or of
another shape is refused as one line naming the file and the member (``GRPO.load``'s zip, the
env policy folder that ``grpo-seq eval env`` reads)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Callable

import pytest
from faultkit import TINY, one_error_line, tree_hashes

from grpo_seq.errors import RunDirError, UsageError
from grpo_seq.io.run_dir import replace_run, run_files

# -- --overwrite deletes only what a run of ours wrote ----------------------------------------------


def test_overwrite_keeps_what_no_run_wrote(run_main, cartpole, run_copy):
    (run_copy / "model").mkdir()
    (run_copy / "model" / "notes.txt").write_text("my notes")  # an env run never writes model/
    (run_copy / "mydata.csv").write_text("a,b\n1,2\n")
    mine = {k: v for k, v in tree_hashes(run_copy).items() if k.startswith("model/") or k == "mydata.csv"}
    res = run_main(cartpole, [*TINY, "--seed", "1", "--overwrite", "--output_dir", str(run_copy)])
    assert res.code == 0, res
    line = next(ln for ln in res.out.splitlines() if ln.startswith("--overwrite: replacing the run in"))
    assert line.startswith(f"--overwrite: replacing the run in {run_copy}: config.json, metrics.jsonl, summary.json, "
                           "checkpoints, policy")
    assert "model" not in line.split(": ", 2)[2].split(", ") and "mydata.csv" not in line
    after = tree_hashes(run_copy)
    assert {k: after.get(k) for k in mine} == mine  # byte-identical
    assert json.loads((run_copy / "config.json").read_text())["seed"] == 1


def test_a_folder_without_a_runs_record_is_refused_even_with_overwrite(run_main, cartpole, tmp_path):
    folder = tmp_path / "mine"
    (folder / "policy").mkdir(parents=True)  # named as a run's policy/, but no run's config.json says it wrote it
    (folder / "policy" / "weights.bin").write_bytes(b"\x00\x01")
    (folder / "mydata.csv").write_text("1\n")
    before = tree_hashes(folder)
    for extra in ([], ["--overwrite"]):
        res = run_main(cartpole, [*TINY, *extra, "--output_dir", str(folder)])
        assert res.code == 2, res
        assert one_error_line(res.err) == (
            f"error: --output_dir {folder} holds policy but no config.json of a run saying it wrote them, so "
            "--overwrite does not delete them (nothing was changed); move them away, or give this run another "
            "--output_dir")
        assert tree_hashes(folder) == before


def test_an_lm_runs_record_names_what_it_wrote(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"kind": "lm", "num_generations": 2}))
    for name in ("metrics.jsonl", "model/config.json", "policy/mine.txt", "agent.gif"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert run_files(tmp_path) == ["config.json", "metrics.jsonl", "model"]  # an lm run writes no policy/ nor agent.gif
    replace_run(tmp_path, ["config.json", "metrics.jsonl", "model", "policy", "agent.gif"])
    assert "replacing the run in" in capsys.readouterr().out
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["agent.gif", "policy",
                                                                                     "policy/mine.txt"]


def test_replace_run_without_a_record_deletes_nothing(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "config.json").write_text("[not, a run's]")
    with pytest.raises(RunDirError, match="no config.json of a run saying it wrote them"):
        replace_run(tmp_path, ["config.json", "model"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model"]


# -- GRPO.save's zip: damaged, another format version, another shape ------------------------------

@pytest.fixture(scope="module")
def saved_zip(tmp_path_factory) -> Path:
    from grpo_seq import GRPO

    path = tmp_path_factory.mktemp("sb3") / "good.zip"
    GRPO("MlpPolicy", "CartPole-v1", seed=0, policy_kwargs={"net_arch": [8]}).save(path)
    return path


def rezip(source: Path, target: Path, edit: Callable[[str, bytes], bytes | None]) -> Path:
    """A copy of the zip ``source`` with each member passed through ``edit`` (None: left out)."""
    with zipfile.ZipFile(source) as z, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for name in z.namelist():
            data = edit(name, z.read(name))
            if data is not None:
                out.writestr(name, data)
    return target


def edit_json(member: str, **changes) -> Callable[[str, bytes], bytes]:
    def edit(name: str, data: bytes) -> bytes:
        if name != member:
            return data
        value = json.loads(data)
        for key, new in changes.items():
            if isinstance(new, dict):
                value[key] = {**value[key], **new}
            else:
                value[key] = new
        return json.dumps(value).encode()
    return edit


def cut(source: Path, target: Path, keep: float) -> Path:
    data = source.read_bytes()
    target.write_bytes(data[: int(len(data) * keep)])
    return target


def damaged_member(source: Path, target: Path) -> Path:
    """Bytes inside model.safetensors' compressed data overwritten (its CRC no longer matches)."""
    data = bytearray(source.read_bytes())
    start = data.find(b"model.safetensors") + 40
    data[start:start + 20] = bytes(20)
    target.write_bytes(bytes(data))
    return target


CASES = {
    "truncated": (lambda s, t: cut(s, t, 0.5), "{f} is not a zip file written by GRPO.save (or is cut short"),
    "its last bytes cut": (lambda s, t: cut(s, t, 0.98), "{f} is not a zip file written by GRPO.save (or is cut short"),
    "a member missing": (lambda s, t: rezip(s, t, lambda n, d: None if n == "grpo.json" else d),
                         "{f} lacks grpo.json: not a file written by GRPO.save"),
    "policy.json not JSON": (lambda s, t: rezip(s, t, lambda n, d: b"{not json" if n == "policy.json" else d),
                             "{f}: member policy.json cannot be read (Expecting property name"),
    "grpo.json a list": (lambda s, t: rezip(s, t, lambda n, d: b"[1]" if n == "grpo.json" else d),
                         "{f}: member grpo.json cannot be read (a JSON object expected, found list)"),
    "a damaged member": (damaged_member, "{f}: member model.safetensors is damaged (Bad CRC-32"),
    "weights cut short": (lambda s, t: rezip(s, t, lambda n, d: d[: len(d) // 2] if n == "model.safetensors" else d),
                          "{f}: member model.safetensors cannot be read (Error while deserializing"),
    "a newer format version": (lambda s, t: rezip(s, t, edit_json("grpo.json", format="grpo-seq GRPO 3")),
                               "{f} is of format 'grpo-seq GRPO 3', newer than this grpo-seq reads ('grpo-seq GRPO "
                               "2'): it was saved by a later grpo-seq; upgrade grpo-seq to load it"),
    "another format": (lambda s, t: rezip(s, t, edit_json("grpo.json", format="sb3 2.3")),
                       "{f} is of format 'sb3 2.3', not one GRPO.save writes; this grpo-seq reads 'grpo-seq GRPO 2'"),
    "no format": (lambda s, t: rezip(s, t, edit_json("grpo.json", format=None)),
                  "{f} is of format None, not one GRPO.save writes"),
    "grpo.json without its config": (lambda s, t: rezip(s, t, edit_json("grpo.json", config=[])),
                                     "{f}: grpo.json lacks config (or holds the wrong type)"),
    "weights of another shape": (lambda s, t: rezip(s, t, edit_json("policy.json", kwargs={"hidden_sizes": [16]})),
                                 "{f}: the weights in model.safetensors do not fit the CategoricalMLPPolicy policy.json "
                                 "describes: net.0.weight is [8, 4], the policy's [16, 4]"),
    "policy.json kwargs another policy's": (lambda s, t: rezip(s, t, edit_json("policy.json", kwargs={"width": 3})),
                                            "{f}: policy.json's kwargs do not make a CategoricalMLPPolicy"),
    # sizes of 160 GB declared in a file of a few kilobytes: refused before anything is allocated
    "a huge network declared": (lambda s, t: rezip(s, t, edit_json("policy.json", kwargs={"hidden_sizes": [200000, 200000]})),
                                "{f}: the weights in model.safetensors do not fit the CategoricalMLPPolicy policy.json "
                                "describes: net.4.weight missing"),
    "a negative width declared": (lambda s, t: rezip(s, t, edit_json("policy.json", kwargs={"hidden_sizes": [-5]})),
                                  "{f}: policy.json's kwargs do not make a CategoricalMLPPolicy (Trying to create tensor "
                                  "with negative dimension"),
    "a member over its size limit": (lambda s, t: rezip(s, t, lambda n, d: d + b" " * (1 << 20) if n == "grpo.json" else d),
                                     "{f}: member grpo.json holds 1,049,"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_saved_model_is_one_line_naming_the_file(saved_zip, tmp_path, case):
    from grpo_seq import GRPO
    from grpo_seq.sb3.saving import SavedModelError

    make, expected = CASES[case]
    bad = make(saved_zip, tmp_path / "bad.zip")
    before = tree_hashes(tmp_path)
    with pytest.raises(SavedModelError) as caught:
        GRPO.load(bad)
    message = str(caught.value)
    assert isinstance(caught.value, UsageError) and isinstance(caught.value, ValueError)
    assert "\n" not in message and message.startswith(f"GRPO.load: {bad}")
    assert expected.format(f=bad) in message, message
    assert tree_hashes(tmp_path) == before


def test_a_good_save_still_loads(saved_zip):
    from grpo_seq import GRPO

    model = GRPO.load(saved_zip)
    assert list(model.policy.init_kwargs["hidden_sizes"]) == [8] and model.predict([0.0] * 4)[0] in (0, 1)


# -- the env policy folder (policy/: save_policy, load_policy), through grpo-seq eval env ----------

@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory) -> Path:
    from grpo_seq.policies import CategoricalMLPPolicy
    from grpo_seq.io.serialization import save_policy

    return save_policy(CategoricalMLPPolicy(4, 2, (8,)), tmp_path_factory.mktemp("pol") / "policy")


def _truncate(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:40])


def _policy_json(text: str) -> Callable[[Path], None]:
    return lambda folder: (folder / "policy.json").write_text(text)


POLICY_CASES = [
    pytest.param(_truncate, "model.safetensors", id="model.safetensors truncated"),
    pytest.param(_policy_json("{bad"), "policy.json: not valid JSON", id="policy.json not JSON"),
    pytest.param(_policy_json('{"class": "CategoricalMLPPolicy"}'), "policy.json: no \"kwargs\" mapping",
                 id="policy.json without kwargs"),
    pytest.param(_policy_json('{"class": "CategoricalMLPPolicy", "kwargs": {"width": 3}}'),
                 "policy.json: its kwargs do not make a CategoricalMLPPolicy", id="policy.json kwargs another policy's"),
]


@pytest.mark.parametrize("damage, named", POLICY_CASES)
def test_a_damaged_policy_folder_is_one_line_naming_the_file(run_main, policy_dir, tmp_path, damage, named):
    from grpo_seq.cli.tools import eval_env

    folder = tmp_path / "policy"
    shutil.copytree(policy_dir, folder)
    damage(folder)
    before = tree_hashes(folder)
    res = run_main(eval_env, ["--policy", str(folder), "--episodes", "1"], script="grpo-seq")
    assert res.code == 2, res
    assert f"{folder / named.split(':')[0]}" in one_error_line(res.err) and named.split(": ", 1)[-1] in res.err
    assert tree_hashes(folder) == before


def test_a_zip_given_to_eval_env_is_one_line(run_main, saved_zip):
    from grpo_seq.cli.tools import eval_env

    res = run_main(eval_env, ["--policy", str(saved_zip)], script="grpo-seq")
    assert res.code == 2, res
    assert one_error_line(res.err) == (f"error: --policy {saved_zip} is a file; give the folder of a saved policy "
                                       "(model.safetensors and policy.json, as a run's policy/); a GRPO.save zip is "
                                       "read with GRPO.load in Python")
