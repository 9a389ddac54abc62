"""The session's change points (the night's notes, and the store's notes less the report's) search
each check's last ``history.WINDOW`` runs, not the whole ``history.jsonl``: PELT's cost grows with
the square of a series' length, and the file grows by one run per check every night."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_convperf.night import decide, history

pytest.importorskip("ruptures", reason="change points need ruptures: pip install '.[history]'")

RUNS = 3 * history.WINDOW  # a history three windows long
STEP_KEY, FLAT_KEY = "test_conv::test_fwd@p1", "test_conv::test_fwd@p2"


def _records(runs: int = RUNS) -> list[dict[str, Any]]:
    """Two checks; STEP_KEY 20 % slower from its 3rd-last run on, so tonight the step is new."""
    out = []
    for i in range(runs):
        for key in (STEP_KEY, FLAT_KEY):
            ratio = 0.5 * (1.2 if key == STEP_KEY and i >= runs - history.PERSIST else 1.0)
            ratio *= 1 + 0.004 * math.sin(3 * i + len(key))
            out.append(
                {
                    "schema": "convperf-history/1",
                    "when": f"2026-01-01T00:00:00+00:00#{i:05d}",
                    "commit": f"c{i}",
                    "machine": "box",
                    "module": "test_conv",
                    "key": key,
                    "verdict": "PASS",
                    "time_ratio": ratio,
                    "ln_ratio": math.log(ratio),
                }
            )
    return out


def _write_history(folder: Path, records: Sequence[dict[str, Any]]) -> None:
    (folder / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture
def searched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every series the change-point search is given."""
    lengths: list[int] = []
    search = history.breakpoints

    def spy(values: Sequence[float], **kwargs: Any) -> list[int]:
        lengths.append(len(values))
        return search(values, **kwargs)

    monkeypatch.setattr(history, "breakpoints", spy)
    return lengths


def test_the_nights_new_change_points_search_each_checks_last_window_runs(
    tmp_path: Path, searched: list[int]
) -> None:
    _write_history(tmp_path, _records())
    lines, notes = decide.new_change_point_lines(tmp_path)
    assert searched == [history.WINDOW, history.WINDOW]  # two checks of RUNS runs each
    assert notes == [] and len(lines) == 1 and lines[0].startswith(f"{STEP_KEY} [box]: step +19.9 %")
    assert f"at commit c{RUNS - 3} " in lines[0] and "(117 runs before, 3 after) NEW" in lines[0]
    # The step the whole history gives (same check, commit, size), its index in the whole series.
    series = history.read_history(tmp_path)[0]
    (whole,) = [c for c in history.all_change_points(series) if c.new]
    (recent,) = history.recent_change_points(series)
    assert (
        (recent.key, recent.commit, recent.index)
        == (whole.key, whole.commit, whole.index)
        == (
            STEP_KEY,
            f"c{RUNS - 3}",
            RUNS - 3,
        )
    )
    assert recent.step == pytest.approx(whole.step, abs=0.002)


def test_the_stores_notes_leave_out_the_reports_over_the_same_window(
    tmp_path: Path, searched: list[int]
) -> None:
    pytest.importorskip(
        "sqlalchemy",
        reason="the store needs SQLAlchemy (absent after pip install --no-deps): pip install SQLAlchemy",
    )
    from pytest_convperf.reports.results_writer import ResultsWriter
    from pytest_convperf.resultsdb import db

    records = _records()
    tonight, before = records[-2:], records[:-2]
    _write_history(tmp_path, before)  # the built-in report appends tonight's after this writer
    url = f"sqlite:///{tmp_path / 'team.sqlite'}"
    engine, _ = db.open_store(url)
    db.write(engine, records, source="test")
    engine.dispose()
    writer = ResultsWriter(url, tmp_path, explicit=True)
    # The step is new in the store and in the report's history: the report's note says it, not this.
    assert writer.change_points(tonight) == []
    # As a session runs now (issue 37.5): the built-in report has appended tonight's records
    # (with their session id) before the store's writer runs; they are not counted twice.
    session_id = "s-tonight"
    tonight = [dict(rec, session_id=session_id) for rec in tonight]
    _write_history(tmp_path, [*before, *tonight])
    assert writer.change_points(tonight) == []
    assert searched and max(searched) == history.WINDOW, searched  # store and report, each check
