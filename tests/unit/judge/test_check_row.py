"""A typed ``CheckRow`` through its dict form (xdist, the journal, rows.json) and back, unchanged;
rows of older formats (``core.row_format``) converted when read."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pytest_convperf.core.results import ErrorStats, Verdict
from pytest_convperf.core.row_format import ROW_FORMAT
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.judge.entry import Entry, UpdatePlan
from pytest_convperf.judge.outcome import Decision
from tests.unit.judge.test_verdict import comparison

STORED = Entry(
    time_ratio=0.5,
    noise=0.012,
    us_candidate=15.0,
    us_reference=30.0,
    env={"torch": "2.5", "cudnn": "90100"},
    reference_backend="CudnnConv",
    correctness={"max_abs": 1e-6, "max_rel": 2e-5},
    updated={"commit": "abc1234", "reason": "faster"},
    noise_runs=5,
    ref_runs=3,
    tolerance=0.05,
    quality={"rel_l2": 0.01, "sqnr_db": 40.0},
    mode="cold",
    flush="read",
    kernels=({"name": "k1", "calls": 1.0, "share": 1.0},),  # floats, as profiling.kernel_table makes them
)


def _full_row() -> CheckRow:
    """A row with every field set, as a judged check with a confirm and a written update has."""
    first, confirm = comparison(0.6, n=41), comparison(0.62, n=123)
    decision = Decision(
        verdict=Verdict.FAIL,
        outcome="fail",
        message="FAIL (confirmed): slower",
        stage="confirm",
        tolerance=0.05,
        noise=0.012,
        delta=0.2,
        delta_ci=(0.15, 0.25),
        sigma=0.01,
        mde=0.03,
        rounds_needed=120,
        env_diff={"torch": ("2.4", "2.5")},
        notes=("a note",),
        confirm=confirm,
        p_value=1e-6,
    )
    err = ErrorStats("output", 1e-6, 1e-5, 1e-7, 1e-5, 1e-4, (0, 1), 1.0, 1.0, 0, 0, 16)
    return CheckRow(
        key="test_k@p",
        nodeid="t.py::test_k",
        module="t",
        problem="p",
        phase="forward",
        comparison=first,
        errors=(err,),
        verdict=Verdict.FAIL,
        message="FAIL (confirmed): slower",
        facts={"seed": 1, "timer": "fake"},
        extra_metrics={"rel_l2": 0.01},
        machine="box",
        baselines_file="bl/box/t.yaml",
        device_kind="cpu",
        env={"torch": "2.5"},
        timing={"mode": "cold", "flush": "read"},
        decision=decision,
        baseline=STORED,
        update=UpdatePlan("write", "updated", STORED, slower=True, written=True),
        night={"adjusted_p": 0.01, "kept": True},
    )


def test_a_row_with_every_field_round_trips_through_json() -> None:
    row = _full_row()
    text = json.dumps(row.to_dict(), sort_keys=False)
    back = CheckRow.from_dict(json.loads(text))
    assert back == row
    assert json.dumps(back.to_dict(), sort_keys=False) == text  # byte for byte, key order included


def test_the_dict_form_is_the_one_rows_json_always_had() -> None:
    # The judged parts as their own dict forms, in the order rows.json has always had them.
    row = _full_row()
    out = row.to_dict()
    assert list(out) == [
        "format", "key", "nodeid", "module", "problem", "phase", "comparison", "errors", "verdict", "message",
        "facts", "extra_metrics", "machine", "baselines_file", "device_kind", "env", "timing",
        "decision", "baseline", "update", "night",
    ]  # fmt: skip
    assert out["verdict"] == "FAIL" and type(out["verdict"]) is str
    assert out["format"] == ROW_FORMAT == 3
    # The decision's own verdict and message are the row's: written once, at the row's level.
    assert row.decision is not None and out["decision"] == {
        k: v for k, v in row.decision.to_dict().items() if k not in ("verdict", "message")
    }
    assert out["baseline"] == STORED.to_yaml()
    assert out["update"] == {
        "action": "write",
        "why": "updated",
        "slower": True,
        "entry": STORED.to_yaml(),
        "written": True,
    }


def test_a_row_holds_env_verdict_and_message_once() -> None:
    row = _full_row()
    # The stored entry and the proposed one (baseline, update) are entries: they keep their own env.
    text = json.dumps({k: v for k, v in row.to_dict().items() if k not in ("baseline", "update")})
    for key in ('"env"', '"verdict"', '"message"'):
        assert text.count(key) == 1, key
    # A night's or a fresh confirm's word changes the row and its decision together.
    suspect = replace(row, verdict=Verdict.SUSPECT, message="SUSPECT: not significant across the session")
    assert suspect.decision is not None and suspect.decision.verdict is Verdict.SUSPECT
    assert suspect.decision.message == suspect.message
    assert CheckRow.from_dict(json.loads(json.dumps(suspect.to_dict()))) == suspect


def test_a_format_1_row_is_converted_and_a_newer_one_refused() -> None:
    # Format 1 (no "format" key) stored env in the row, its facts and its comparison's facts, and
    # the verdict and message in the row and its decision: read, it is the same row held once.
    row = _full_row()
    old = row.to_dict()
    del old["format"]
    old["facts"] = {**old["facts"], "env": {"torch": "2.5.1"}}
    old["comparison"]["facts"] = {**old["comparison"]["facts"], "env": {"torch": "2.5.1"}}
    assert row.decision is not None
    old["decision"] = row.decision.to_dict()
    back = CheckRow.from_dict(old)
    assert back == row  # the facts' copies of env gone
    newer = {**row.to_dict(), "format": ROW_FORMAT + 1}
    with pytest.raises(ValueError, match=r"row format 4 is newer than this pytest-convperf reads \(3\)"):
        CheckRow.from_dict(newer)
    corrupt = {**row.to_dict(), "format": "2"}
    with pytest.raises(ValueError, match=r"row format '2' is not a format number: the row is corrupt"):
        CheckRow.from_dict(corrupt)


def test_a_format_2_row_reads_back_with_its_seed_and_machine_once() -> None:
    # Format 2 also stored the row's seed and machine in its comparison's facts and its confirm's
    # (``PairedTiming.for_check``): read, the copies are gone and the row's own facts keep them.
    row = replace(_full_row(), facts={"seed": 1, "machine": "box-slug", "timer": "fake"})
    old = row.to_dict()
    old["format"] = 2
    copies = {"seed": 1, "machine": "box-slug", "phase": "forward"}
    old["comparison"]["facts"] = {**old["comparison"]["facts"], **copies}
    old["decision"]["confirm"]["facts"] = {**old["decision"]["confirm"]["facts"], **copies}
    back = CheckRow.from_dict(json.loads(json.dumps(old)))
    assert back.comparison is not None and back.comparison.facts == {"phase": "forward"}
    assert back.decision is not None and back.decision.confirm is not None
    assert back.decision.confirm.facts == {"phase": "forward"}
    assert back.facts == row.facts
    text = json.dumps(back.to_dict())
    assert text.count('"seed"') == 1 and text.count('"box-slug"') == 1


def test_a_plan_not_yet_applied_has_no_written_key() -> None:
    assert "written" not in UpdatePlan("write", "new entry", STORED).to_dict()
    assert UpdatePlan.from_dict(UpdatePlan("keep", "in band").to_dict(), "k") == UpdatePlan("keep", "in band")


def test_a_verdict_prints_as_its_value() -> None:
    # Typed verdicts reach the same terminal and Markdown text the string verdicts did.
    assert f"{Verdict.FAIL}" == "FAIL" and str(Verdict.SUSPECT) == "SUSPECT"
    assert f"{Verdict.NEW:<8}|" == "NEW     |"


def test_a_row_with_a_decision_always_has_its_verdict() -> None:
    # A row made with a decision and no verdict says its decision's word, so the reports read only
    # the row's verdict and message (no fallback into the decision).
    row = replace(_full_row(), verdict=None, message="")
    assert row.decision is not None
    assert (row.verdict, row.message) == (Verdict.FAIL, "FAIL (confirmed): slower")
    assert CheckRow.from_dict(json.loads(json.dumps(row.to_dict()))) == row
    from pytest_convperf.reports.report_row import ReportRow

    assert ReportRow.from_row(row).verdict == "FAIL"


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("env",), ["torch", "2.5"], "env"),
        (("timing",), {"mode": 1}, "timing"),
        (("machine",), 7, "machine"),
        (("comparison", "se"), "0.1", "se"),
        (("comparison", "candidate", "samples"), [1.0, "x"], "samples"),
        (("decision", "delta_ci"), [0.1], "delta_ci"),
        (("decision", "env_diff"), {"torch": "2.5"}, "env_diff.torch"),
        (("errors",), [{"name": "out"}], "max_abs"),
        (("night", "kept"), "yes", "kept"),
    ],
)
def test_a_row_field_of_the_wrong_type_is_refused_naming_it(
    path: tuple[str, ...], value: object, field: str
) -> None:
    # A row read back from rows.json or the journal is checked field by field: a wrong type is a
    # ValueError naming the field (the journal's reader names the row and skips it), never a wrong
    # type inside the frozen row.
    data = json.loads(json.dumps(_full_row().to_dict()))
    target = data
    for name in path[:-1]:
        target = target[name]
    target[path[-1]] = value
    with pytest.raises(ValueError, match=rf"field '{field}'"):
        CheckRow.from_dict(data)
