"""metrics.jsonl: NaN as null, and rows after a checkpoint dropped on resume."""

import json

from grpo_seq.io.metrics import JsonlLogger


def test_nan_is_null_and_truncate_after_drops_later_rows_and_a_cut_line(tmp_path):
    log = JsonlLogger(tmp_path / "metrics.jsonl")
    for step in (1, 2, 3):
        log.log({"step": step, "x": float("nan") if step == 2 else step})
    log._fh.write('{"step": 4, "x"')  # a line cut by a kill
    log._fh.flush()
    log.truncate_after(2)
    log.log({"step": 3, "x": 30})
    log.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "x": 1}, {"step": 2, "x": None}, {"step": 3, "x": 30}]
