"""Line logs as units of work: which lines count, what a damaged line says, and how a log is cut."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper.simic.ppo.history import PPOHistoryRow
from esper.storage.logcut import IncompleteLogError, UnitLog
from esper.storage.rows import LogFormatError, jsonl_lines, read_rows
from esper.storage.rundir import RunDirectoryError


def _batch(path: Path) -> UnitLog:
    return UnitLog.read(path, lambda row: row.get("batch"))


def test_a_torn_last_line_is_left_out_and_a_damaged_one_elsewhere_names_the_fix(tmp_path: Path) -> None:
    log = tmp_path / "history.jsonl"
    log.write_text('{"batch": 0}\n{"batch": 1}\n{"bat')
    assert [line.value for line in jsonl_lines(log)] == [{"batch": 0}, {"batch": 1}]
    log.write_text('{"batch": 0}\n{"bat\n{"batch": 2}\n')
    with pytest.raises(LogFormatError) as info:
        jsonl_lines(log)
    message = str(info.value)
    assert message.startswith(f"{log}:2 is not valid JSON: repair or delete that line") and "\n" not in message
    log.write_text('{"batch": 0, "extra": 1}\n')
    with pytest.raises(LogFormatError, match=r"history.jsonl:1 does not match the PPOHistoryRow schema .*: read it "
                                             r"with the esper version that wrote it, or, if it was edited, repair"):
        read_rows(log, PPOHistoryRow)


def test_a_cut_keeps_the_lines_of_the_kept_units_byte_for_byte(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    lines = ['{"batch": 0, "x": 1.10}', '{"batch":1}', '{"batch": 0, "x": 2e-7}', '{"batch": 2}']
    log.write_text("\n".join(lines) + "\n" + '{"batch": 1, "x"')  # a torn last line of batch 1
    unit_log = _batch(log)
    assert unit_log.first_incomplete({0: 2, 1: 1}) is None
    assert unit_log.first_incomplete({0: 2, 1: 2}) == 1 and unit_log.first_incomplete({0: 2, 3: 1}) == 3
    unit_log.cut({0, 1})
    assert log.read_text() == "\n".join(lines[:3]) + "\n"
    assert not (tmp_path / "steps.jsonl.tmp").exists()


@given(st.lists(st.integers(0, 4), max_size=12), st.sets(st.integers(0, 4)))
def test_a_cut_keeps_exactly_the_rows_of_the_kept_units_in_order(batches: list[int], keep: set[int]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "history.jsonl"
        log.write_text("".join(json.dumps({"batch": b, "i": i}) + "\n" for i, b in enumerate(batches)))
        _batch(log).cut(keep)
        assert [row["i"] for row in map(json.loads, log.read_text().splitlines())] == \
            [i for i, b in enumerate(batches) if b in keep]


def test_the_refusal_names_the_file_what_it_lacks_and_the_fix(tmp_path: Path) -> None:
    log = tmp_path / "history.jsonl"
    log.write_text('{"batch": 0}\n')
    error = _batch(log).refuse("the row of batch 1", tmp_path / "checkpoints" / "latest.pt", tmp_path)
    assert isinstance(error, RunDirectoryError) and isinstance(error, IncompleteLogError)
    message = str(error)
    assert message.startswith(f"{log} lacks the row of batch 1 (its line is torn or missing), but ")
    assert "--overwrite" in message and f"delete {tmp_path}" in message and "\n" not in message
