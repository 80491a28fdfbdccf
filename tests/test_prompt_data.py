"""grpo_seq.io.prompt_data: TRL's dataset formats from every kind of file, each row checked up front."""

from __future__ import annotations

import json

import pytest

from grpo_seq.errors import UsageError
from grpo_seq.io.prompt_data import prompt_rows, read_rows

ROWS = [{"prompt": "1+1?", "answer": "2"}, {"prompt": "2+2?", "answer": "4"}]


def write(path, fmt: str, rows=ROWS):
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "csv":
        path.write_text("prompt,answer\n" + "".join(f"{r['prompt']},{r['answer']}\n" for r in rows))
    elif fmt == "parquet":
        from datasets import Dataset

        Dataset.from_list(rows).to_parquet(str(path))
    else:  # a save_to_disk folder
        from datasets import Dataset

        Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet", "disk"])
def test_every_format_reads_the_same_rows(tmp_path, fmt):
    path = write(tmp_path / (f"d.{fmt}" if fmt != "disk" else "saved"), fmt)
    rows = prompt_rows(read_rows(str(path)))
    assert [dict(r) for r in rows] == ROWS


@pytest.mark.parametrize("fmt, place", [("jsonl", "line 2"), ("csv", "line 3"), ("parquet", "row 2"), ("disk", "row 2")])
def test_a_bad_row_is_named_by_file_and_row(tmp_path, fmt, place):
    path = write(tmp_path / (f"d.{fmt}" if fmt != "disk" else "saved"), fmt, [ROWS[0], {"prompt": " ", "answer": "4"}])
    with pytest.raises(UsageError) as e:
        prompt_rows(read_rows(str(path)))
    assert f"{path}" in str(e.value) and place in str(e.value) and "empty 'prompt'" in str(e.value)


def test_conversational_prompts_columns_and_the_question_answer_layout(tmp_path):
    chat = [{"prompt": [{"role": "user", "content": "hi"}], "level": 3}]
    assert prompt_rows(read_rows(chat), system_prompt="be brief")[0] == {
        "level": 3, "prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
    gsm = [{"question": "1+1?", "solution": "#### 2"}]
    row = prompt_rows(read_rows(gsm), answer_column="solution", instruction="Think.", as_chat=True)[0]
    assert row == {"prompt": [{"role": "user", "content": "1+1?\nThink."}], "answer": "#### 2"}
    with pytest.raises(UsageError, match="no 'prompt' column .* --prompt_column"):
        prompt_rows(read_rows([{"text": "x"}]))
    with pytest.raises(UsageError, match="each message of 'prompt' needs a string 'role' and 'content'"):
        prompt_rows(read_rows([{"prompt": [{"role": "user"}]}]))
    with pytest.raises(UsageError, match="holds no dataset written by save_to_disk"):
        read_rows(str(tmp_path))


def test_a_hub_dataset_without_a_network_is_one_line_at_once(monkeypatch):
    import socket

    from huggingface_hub import constants

    def no_network(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    with pytest.raises(UsageError) as e:
        read_rows("someone/some-dataset")
    message = str(e.value)
    assert "someone/some-dataset is read from the hub, which cannot be reached (huggingface.co: Name or service" in message
    assert "--dataset path/to/file.jsonl" in message
