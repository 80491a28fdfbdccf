"""Datasets: every row read and checked up front, a bad one named by file and line."""

import pytest

from grpo_seq.io.prompt_data import chat_prompts, read_json_rows
from grpo_seq.errors import UsageError


def test_rows_remember_their_lines_and_become_chat_prompts(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "1+1?", "answer": "2"}\n\n{"question": "2+2?", "answer": "4"}\n')
    rows = read_json_rows(path)
    assert list(rows) == [{"question": "1+1?", "answer": "2"}, {"question": "2+2?", "answer": "4"}]
    prompts = chat_prompts(rows, system_prompt="Be brief.", instruction="Answer with a number.")
    assert prompts[1] == {"prompt": [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "2+2?\nAnswer with a number."}], "answer": "4"}


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty"),
    ('{"question": "a", "answer": "1"}\n{"question": \n', "line 2: not valid JSON"),
    ('{"question": "a", "answer": "1"}\n[1, 2]\n', "line 2: expected a JSON object"),
])
def test_a_bad_file_is_named_by_line(tmp_path, text, message):
    path = tmp_path / "d.jsonl"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        read_json_rows(path)


def test_a_row_without_its_answer_is_named_by_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "a", "answer": "1"}\n{"question": "b"}\n')
    with pytest.raises(UsageError, match="line 2"):
        chat_prompts(read_json_rows(path), source=str(path))


@pytest.mark.parametrize("name", ["d.jsonl", "d.csv"])
def test_bytes_that_are_not_utf8_are_named_by_line_and_offset(tmp_path, name):
    from grpo_seq.io.prompt_data import read_rows

    path = tmp_path / name
    first = '{"question": "a", "answer": "1"}\n' if name.endswith("jsonl") else "question,answer\n"
    path.write_bytes(first.encode() + b"\n" + b"na\xefve")
    with pytest.raises(UsageError) as e:
        read_rows(str(path))
    offset = len(first) + 1 + 2
    assert f"{path} line 3: not UTF-8: byte 0xef at byte offset {offset} (column 3, invalid continuation byte)" in str(e.value)
