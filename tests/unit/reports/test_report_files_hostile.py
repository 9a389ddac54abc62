"""A corrupt or cut-off history.jsonl or journal never costs the night's reports (issue 25.3).

Every case of the hostile corpus (``tests/hostile_jsonl.py``: cut-off and invalid lines, wrong
types, NaN/Inf, non-UTF-8, huge lines, an empty file, missing fields) goes through ``history``,
``report`` and the session's report writer: none raises, the good records are all used, and each
bad line is named with its file and line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_convperf.__main__ import main
from pytest_convperf.core.jsonl import read_objects
from pytest_convperf.night.history import all_change_points, read_history
from pytest_convperf.reports import journal
from pytest_convperf.reports.report_files import write_reports
from tests.hostile_jsonl import field_cases, files
from tests.rows import check_row

pytest.importorskip("ruptures")


def _history(n: int = 8, ratio: float = 0.6) -> list[dict[str, object]]:
    return [
        {
            "when": f"2026-10-{1 + i:02d}T00:00:00+00:00",
            "commit": f"c{i:03d}",
            "machine": "h100",
            "key": "test_dw[x]",
            "verdict": "PASS",
            "time_ratio": ratio,
            "ln_ratio": math.log(ratio) + 0.001 * (-1) ** i,
        }
        for i in range(n)
    ]


HISTORY = _history()
HISTORY_FILES = files(HISTORY)
HISTORY_FIELDS = field_cases(HISTORY)


def _rows() -> list[dict[str, object]]:
    comp = {"candidate": {"median": 5e-4}, "reference": {"median": 1e-3}}
    return [
        check_row(
            {"key": f"test_{c}", "nodeid": f"t.py::test_{c}", "verdict": "PASS", "comparison": comp}
        ).to_dict()
        for c in "ab"
    ]


ROWS = _rows()
JOURNAL_FILES = files(ROWS)
JOURNAL_FIELDS = field_cases(ROWS[:1])


def _seed(directory: Path, name: str, data: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(data)
    return directory


@pytest.mark.parametrize("case", sorted(HISTORY_FILES))
def test_history_uses_every_good_record_and_names_each_bad_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, good = HISTORY_FILES[case]
    d = _seed(tmp_path, "history.jsonl", data)
    assert main(["history", str(d), "--no-plot"]) == 0
    out = capsys.readouterr().out
    series, skipped = read_history(d)
    assert sum(len(points) for points in series.values()) == good
    for s in skipped:  # named: file, line and why
        assert f"history.jsonl:{s.line}: " in out and s.why and s.line >= 1


@pytest.mark.parametrize("case", sorted(HISTORY_FIELDS))
def test_history_survives_a_wrong_or_missing_field(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _seed(tmp_path, "history.jsonl", HISTORY_FIELDS[case])
    assert main(["history", str(d), "--no-plot"]) == 0
    series, skipped = read_history(d)
    points = sum(len(p) for p in series.values())
    assert points in (len(HISTORY), len(HISTORY) + 1)  # the odd record is a point or named
    # A record without a ratio is no point and no problem (a correctness failure has none).
    assert points == len(HISTORY) + 1 or skipped or case in ("ln_ratio = null", "ln_ratio missing")
    assert all(math.isfinite(p.ln_ratio) for ps in series.values() for p in ps)


@pytest.mark.parametrize("at", [3, 10, 16])
def test_a_nan_ratio_makes_no_change_point(at: int, tmp_path: Path) -> None:
    # Before: one NaN in a flat series of 20 made a change point "step +nan %" (at 10 and 16) or
    # stopped the history (at 3: "min() arg is an empty sequence").
    recs = _history(20)
    recs[at] = {**recs[at], "ln_ratio": math.nan}
    d = _seed(tmp_path, "history.jsonl", "".join(json.dumps(r) + "\n" for r in recs).encode())
    series, skipped = read_history(d)
    assert all_change_points(series) == [] and len(series[("h100", "test_dw[x]")]) == 19
    assert [s.line for s in skipped] == [at + 1] and "not a finite number" in skipped[0].why


def test_infinite_ratios_are_named_and_left_out(tmp_path: Path) -> None:
    bad = [{**rec, "ln_ratio": v} for rec, v in zip(_history(3), (math.inf, -math.inf, 1e300))]
    recs = _history(12)[:9] + bad + _history(12)[9:]
    d = _seed(tmp_path, "history.jsonl", "".join(json.dumps(r) + "\n" for r in recs).encode())
    series, skipped = read_history(d)
    assert all_change_points(series) == [] and [s.line for s in skipped] == [10, 11, 12]
    assert "no measured time ratio" in skipped[2].why


@pytest.mark.parametrize("case", sorted(JOURNAL_FILES) + sorted(JOURNAL_FIELDS))
def test_report_shows_every_good_row_of_a_hostile_journal(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = JOURNAL_FILES[case][0] if case in JOURNAL_FILES else JOURNAL_FIELDS[case]
    d = _seed(tmp_path, journal.JOURNAL, data)
    code = main(["report", str(d)])
    out, err = capsys.readouterr()
    if case in ("empty file", "blank lines only"):
        assert code == 2 and "no rows in" in err
        return
    assert code == 0 and "test_a" in out
    _, skipped = journal.read_named(d)
    for s in skipped[:5]:
        assert f"{journal.JOURNAL}:{s.line}: " in err


@pytest.mark.parametrize(
    "rows_json", [b"", b'[{"key": "test_a", "nodeid"', b"\xff\xfe", b'{"a": 1}', b"[1, null]"]
)
def test_a_broken_rows_json_falls_back_to_the_journal(
    rows_json: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _seed(tmp_path, journal.JOURNAL, b"".join(json.dumps(r).encode() + b"\n" for r in ROWS))
    (d / "rows.json").write_bytes(rows_json)
    assert main(["report", str(d)]) == 0
    out, err = capsys.readouterr()
    assert "test_a" in out and "test_b" in out and "rows.json" in err


def _write_reports(d: Path) -> list[str]:
    rows = [check_row({**r, "module": "tonight"}) for r in ROWS]
    return write_reports(
        d, rows, machine_info={"machine": "h100"}, commit_info={"id": "abc"}, when="2026-11-01"
    )


@pytest.mark.parametrize("case", sorted(HISTORY_FILES) + sorted(HISTORY_FIELDS))
def test_the_session_writes_its_reports_over_a_hostile_history(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: one bad line of an earlier run's history stopped the end of a normal session; only
    # the journal survived. (speedup.png is drawn from tonight's rows alone: left out, for time.)
    monkeypatch.setattr("pytest_convperf.reports.report_files.plot_speedups", lambda *a, **k: None)
    data = HISTORY_FILES[case][0] if case in HISTORY_FILES else HISTORY_FIELDS[case]
    d = _seed(tmp_path, "history.jsonl", data)
    notes = _write_reports(d)
    for name in ("report.md", "results.json", "rows.json", "night.json"):
        assert (d / name).stat().st_size > 0, name
    # Tonight's records are whole lines of their own, whatever the file ended with.
    series, skipped = read_history(d)
    tonight = [p for ps in series.values() for p in ps if p.when == "2026-11-01"]
    assert len(tonight) == 2
    assert len([n for n in notes if n.startswith("history.jsonl: ")]) == min(len(skipped), 5) + (
        len(skipped) > 5
    )


def test_a_cut_off_last_line_does_not_swallow_the_next_record(tmp_path: Path) -> None:
    line = json.dumps(HISTORY[0]).encode()
    d = _seed(tmp_path, "history.jsonl", line + b"\n" + line[:40])
    _write_reports(d)
    series, skipped = read_history(d)
    assert len([p for ps in series.values() for p in ps if p.when == "2026-11-01"]) == 2
    assert [s.line for s in skipped] == [2]


@pytest.mark.parametrize("case", sorted(JOURNAL_FILES) + sorted(JOURNAL_FIELDS))
def test_the_session_folds_the_good_rows_of_a_hostile_journal(case: str, tmp_path: Path) -> None:
    data = JOURNAL_FILES[case][0] if case in JOURNAL_FILES else JOURNAL_FIELDS[case]
    d = _seed(tmp_path, journal.JOURNAL, data)
    lost, notes = journal.lost_rows(d, {("t.py::test_b", "test_b")})  # test_b came by its report
    assert "test_a" in {r.key for r in lost} or case in ("empty file", "blank lines only")
    assert "test_b" not in {r.key for r in lost}
    assert all(n.startswith("journal: ") for n in notes)


@pytest.mark.parametrize("case", sorted(HISTORY_FILES))
def test_calibrate_reads_the_good_records_of_a_run_and_names_the_rest(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_convperf.__main__ import _records

    data, good = HISTORY_FILES[case]
    records = _records(_seed(tmp_path, "history.jsonl", data))
    assert len([r for r in records if r.get("key") == "test_dw[x]"]) == good
    _, skipped = read_objects(tmp_path / "history.jsonl")  # what is no JSON object (calibrate_records
    assert capsys.readouterr().err.count("line skipped") == len(skipped)  # leaves out the rest)
