"""JSON-lines files (``core/jsonl.py``): one bad line costs only itself, and an append after a cut line
starts a line of its own. (The whole hostile corpus: ``tests/unit/reports/test_report_files_hostile.py``.)"""

from __future__ import annotations

import math
from pathlib import Path

from pytest_convperf.core.jsonl import NAMED, Skipped, end_cut_line, finite, read_objects, summary


def test_objects_are_read_and_each_bad_line_is_named_with_why(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"a": 1}\n'  # a BOM an editor added
        b"\n"  # blank: neither read nor skipped
        b"[1, 2]\n"
        b'{"b": 2\n'
        b'{"c": 3}\x00\x00\n'
        b"\xff\xfe\n"
        b'{"d": NaN}\n'
    )
    objects, skipped = read_objects(path)
    assert objects == [(1, {"a": 1}), (7, {"d": objects[1][1]["d"]})]
    assert math.isnan(objects[1][1]["d"])
    assert [(s.line, s.why.split(" ")[0]) for s in skipped] == [
        (3, "a"),
        (4, "not"),
        (5, "holds"),
        (6, "not"),
    ]
    assert "a JSON list, not an object" in skipped[0].why
    assert "not UTF-8" in skipped[3].why
    assert str(skipped[0]) == f"{path}:3: a JSON list, not an object; line skipped"


def test_a_missing_file_is_no_line_at_all(tmp_path: Path) -> None:
    assert read_objects(tmp_path / "absent.jsonl") == ([], [])


def test_finite_takes_numbers_only() -> None:
    assert finite(3) == 3.0 and finite(0.5) == 0.5
    for bad in (True, "1", None, math.nan, math.inf, 10**400):
        assert finite(bad) is None, bad


def test_summary_names_the_first_few_then_counts(tmp_path: Path) -> None:
    skipped = [Skipped(tmp_path, n, "bad") for n in range(NAMED + 3)]
    lines = summary(skipped)
    assert len(lines) == NAMED + 1 and lines[-1] == "... and 3 more skipped"


def test_an_append_after_a_cut_line_starts_a_new_line(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    end_cut_line(path)  # missing: nothing to end, nothing created
    assert not path.exists()
    path.write_bytes(b'{"a": 1}\n{"b": ')
    end_cut_line(path)
    end_cut_line(path)  # already ended: no blank line added
    with open(path, "ab") as out:
        out.write(b'{"c": 3}\n')
    objects, skipped = read_objects(path)
    assert [obj for _, obj in objects] == [{"a": 1}, {"c": 3}]
    assert [s.line for s in skipped] == [2]
