"""Recording over fresh processes, its pure parts: how many processes per timing mode, which rows
are recorded, and the median entry (the subprocesses themselves: tests/integration/test_fresh_record.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytest_convperf.core.config import ConvperfConfig
from pytest_convperf.core.results import Comparison, Verdict
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.judge.entry import UpdatePlan
from pytest_convperf.judge.outcome import Decision
from pytest_convperf.night.fresh_record import applies, pooled, runs_for, to_record
from tests.unit.judge.test_verdict import comparison, entry

CFG = ConvperfConfig(enabled=True, update=frozenset({"new"}), baselines_dir=Path("baselines"))


def _cpu(ratio: float, *, ref_us: float = 30.0, alone_us: float | None = None) -> Comparison:
    c = comparison(ratio)
    ref = dataclasses.replace(c.reference, mode="cpu", median=ref_us * 1e-6)
    cand = dataclasses.replace(c.candidate, mode="cpu", median=ratio * ref_us * 1e-6)
    c = dataclasses.replace(c, candidate=cand, reference=ref)
    return c.with_facts({"witness_us": alone_us}) if alone_us is not None else c


def _row(c: Comparison, action: str = "write") -> CheckRow:
    return CheckRow(
        key=f"k-{action}",
        nodeid="t.py::test",
        module="t",
        problem="p",
        phase="forward",
        comparison=c,
        errors=(),
        verdict=Verdict.NEW,
        message="",
        decision=Decision(Verdict.NEW, "new", ""),
        update=UpdatePlan(action, "new entry", entry(c.time_ratio)),
    )


def test_cpu_timing_records_over_three_processes_and_the_rest_over_one_unless_told() -> None:
    assert runs_for(CFG, _cpu(0.5)) == 3
    assert runs_for(CFG, comparison(0.5)) == 1  # the fake timer: no process offset to average
    assert runs_for(dataclasses.replace(CFG, record_runs=5), comparison(0.5)) == 5
    assert applies(CFG) and not applies(dataclasses.replace(CFG, record_runs=1))
    assert not applies(dataclasses.replace(CFG, update=frozenset()))  # not updating: nothing recorded


def test_only_planned_writes_of_conclusive_timings_are_recorded_again() -> None:
    rows = [_row(_cpu(0.5)), _row(_cpu(0.5), "keep"), _row(_cpu(0.5), "refused"), _row(comparison(0.5))]
    rows.append(_row(dataclasses.replace(_cpu(0.5), inconclusive="too few rounds")))
    assert to_record(CFG, rows) == rows[:1]


def test_the_entry_is_the_median_of_the_processes_and_counts_them() -> None:
    row = pooled(_row(_cpu(0.40, ref_us=20.0)), [_cpu(0.50, ref_us=30.0), _cpu(0.52, ref_us=31.0)])
    assert row.update is not None and row.update.entry is not None
    new = row.update.entry
    assert new.time_ratio == pytest.approx(0.50) and new.ref_runs == 3
    assert new.us_reference == pytest.approx(30.0) and new.us_candidate == pytest.approx(0.50 * 30.0)
    assert "the median of 3 pytest processes (ratios 0.4, 0.5, 0.52; between-process SD" in row.update.why
    assert row.comparison == _cpu(0.40, ref_us=20.0)  # the row still shows what this process measured


def test_the_witness_is_the_median_of_the_processes_only_where_every_one_timed_it() -> None:
    row = pooled(_row(_cpu(0.40, alone_us=20.0)), [_cpu(0.50, alone_us=29.0), _cpu(0.52, alone_us=31.0)])
    assert row.update is not None and row.update.entry is not None
    assert row.update.entry.us_witness == pytest.approx(29.0)
    some = pooled(_row(_cpu(0.40, alone_us=20.0)), [_cpu(0.50), _cpu(0.52, alone_us=31.0)])
    assert some.update is not None and some.update.entry is not None
    assert some.update.entry.us_witness is None  # a median of two would stand for three


def test_a_recording_that_raises_keeps_this_process_rows_and_says_why() -> None:
    """The base plugin's guard (``FreshProcesses``): the updates still get written, from this process."""
    from types import SimpleNamespace

    from pytest_convperf.night.fresh_record import FreshRecord

    class Broken(FreshRecord):
        def redo(self, rows: object) -> tuple[list[CheckRow], list[str]]:
            raise OSError("no space left on device")

    rows = [_row(_cpu(0.5))]
    before = list(rows)
    session = SimpleNamespace(exitstatus=0)
    lines = Broken(None).pytest_convperf_modify_rows(session, rows)  # type: ignore[arg-type]
    assert rows == before
    why = "(OSError: no space left on device)"
    assert lines == [f"recorded entries not measured again in fresh processes {why}"]
