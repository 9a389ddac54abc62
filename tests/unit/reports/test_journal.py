"""The rows journal (issue 15 item 13): appended per row, read back past a torn last line, folded once."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_convperf.__main__ import main
from pytest_convperf.reports import journal
from tests.disk_full import no_space, refuse_write


def test_rows_are_read_back_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    journal.append(tmp_path, {"nodeid": "t::a", "key": "a"})
    journal.append(tmp_path, {"nodeid": "t::b", "key": "b"})
    with open(tmp_path / journal.JOURNAL, "a") as f:
        f.write('{"nodeid": "t::c", "ke')  # the crash came mid-line
    rows = journal.read(tmp_path)
    assert [r["key"] for r in rows] == ["a", "b"]
    lost, notes = journal.lost_rows(tmp_path, {("t::a", "a")})  # t::a came by its report
    assert [r.key for r in lost] == ["b"]
    (note,) = notes  # the torn line, named
    assert note.startswith(f"journal: {tmp_path / journal.JOURNAL}:3: not JSON") and note.endswith(
        "line skipped"
    )


def test_a_new_session_moves_the_last_journal_aside(tmp_path: Path) -> None:
    journal.append(tmp_path, {"nodeid": "t::a", "key": "a"})
    journal.start(tmp_path)
    assert journal.read(tmp_path) == []
    assert (tmp_path / journal.PREVIOUS).exists()


def test_report_reads_the_journal_of_a_crashed_session(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["report", str(tmp_path)]) == 2
    journal.append(tmp_path, {"nodeid": "t::a", "key": "test_a", "module": "t", "verdict": "PASS"})
    assert main(["report", str(tmp_path)]) == 0
    assert "test_a" in capsys.readouterr().out


def test_a_row_the_disk_refused_midway_does_not_take_the_next_row_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    real_write = os.write
    calls = []

    def full_disk(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:10]))  # a short write ...
        if len(calls) == 2:
            raise no_space()  # ... then the disk is full
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        journal.append(tmp_path, {"nodeid": "t::a", "key": "a"})
    journal.append(tmp_path, {"nodeid": "t::b", "key": "b"})  # space again
    assert [r["key"] for r in journal.read(tmp_path)] == ["b"]


def test_a_full_disk_costs_the_journal_line_not_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.test_session import _row, _session

    monkeypatch.setattr(journal, "append", refuse_write)
    session = _session(tmp_path)
    session.config.workerinput = {}  # an xdist worker: no live progress line
    session.record("t.py::test_k", _row())
    assert session.rows.pending["t.py::test_k"] == [_row()]
    assert "was not journalled: [Errno 28] No space left on device" in session.end.notes[0]


def test_a_row_of_a_newer_format_is_one_line_naming_its_place_and_the_fix(tmp_path: Path) -> None:
    # rows.json format 3 (each thing once); a format-1 row still reads (converted).
    journal.append(tmp_path, {"format": 4, "nodeid": "t::new", "key": "new"})
    journal.append(tmp_path, {"nodeid": "t::old", "key": "old", "facts": {"env": {"torch": "2.5"}}})
    lost, notes = journal.lost_rows(tmp_path, set())
    assert [(r.key, r.facts) for r in lost] == [("old", {})]
    (note,) = notes
    where = f"journal: {tmp_path / journal.JOURNAL}:1"
    assert note == (
        f"{where}: not a usable row (ValueError: row format 4 is newer than this pytest-convperf "
        "reads (3): upgrade pytest-convperf); row skipped"
    )
