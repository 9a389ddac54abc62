"""Quality drift: an entry stores the variant's quality against the float conv (rel_l2, sqnr_db)
from ``extra_metrics``; losing accuracy beyond the tolerance fails like correctness drift, and
recording it needs --convperf-update-baselines=failed and a reason."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from tests.integration._lifecycle import PROBLEM, Suite
from tests.rows import check_row

# The check's quality metrics come from $CONVPERF_TEST_REL_L2 (sqnr_db derived from it).
QUALITY_SUITE = f"""
import json
import math
import os

import pytest
import torch.nn.functional as F
from pytest_convperf.core.problem import Conv2dProblem

P = {PROBLEM}


@pytest.mark.convperf
@pytest.mark.parametrize("problem", [P], ids=str)
def test_a(convperf, problem):
    rel = float(os.environ.get("CONVPERF_TEST_REL_L2", "0.01"))
    convperf.check(F.conv2d, problem, extra_metrics={{"rel_l2": rel, "sqnr_db": -20 * math.log10(rel)}})
"""


def quality_suite(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> Suite:
    suite = Suite(pytester, monkeypatch, plugin_args)
    pytester.makepyfile(test_suite=QUALITY_SUITE)
    set_rel_l2(monkeypatch, 0.01)
    return suite


def set_rel_l2(monkeypatch: pytest.MonkeyPatch, value: float) -> None:
    monkeypatch.setenv("CONVPERF_TEST_REL_L2", repr(value))


def test_quality_is_recorded_and_a_loss_fails_until_recorded_with_a_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = quality_suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=1)
    assert suite.entries()[suite.key()]["quality"] == {"rel_l2": 0.01, "sqnr_db": 40.0}
    suite.run().assert_outcomes(passed=1)

    # 0.01 -> 0.02: twice the error, 6 dB less SQNR: over both tolerances.
    set_rel_l2(monkeypatch, 0.02)
    before = suite.file.read_bytes()
    result = suite.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*quality drift: accuracy against the float conv was lost: rel_l2 0.01 -> 0.02 (over 1.12x*"
            "sqnr_db 40 -> 33.98 dB (down 6.02 dB; tolerance 1 dB*--convperf-reason=*",
        ]
    )
    result.stdout.fnmatch_lines(["CORRECTNESS_FAIL (1)"])
    assert suite.file.read_bytes() == before

    result = suite.run("--convperf-update-baselines")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*recording a lower quality against the float conv needs --convperf-reason=TEXT*"]
    )
    assert suite.file.read_bytes() == before

    suite.run("--convperf-update-baselines", "--convperf-reason=int4 weights").assert_outcomes(passed=1)
    stored = suite.entries()[suite.key()]
    assert stored["quality"] == {"rel_l2": 0.02, "sqnr_db": pytest.approx(33.98, abs=1e-2)}
    assert stored["updated"]["reason"] == "int4 weights"
    suite.run().assert_outcomes(passed=1)

    # Better quality passes (and leaves the file alone).
    set_rel_l2(monkeypatch, 0.005)
    after = suite.file.read_bytes()
    suite.run().assert_outcomes(passed=1)
    assert suite.file.read_bytes() == after


def test_small_quality_changes_and_rounding_level_errors_pass(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = quality_suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=1)
    set_rel_l2(monkeypatch, 0.0105)  # +5 %, 0.42 dB: inside the 1 dB tolerance
    suite.run().assert_outcomes(passed=1)
    suite.edit(suite.key(), quality={"rel_l2": 1e-7, "sqnr_db": 140.0})
    set_rel_l2(monkeypatch, 5e-6)  # 50x, but under the 1e-5 rounding floor (106 dB)
    suite.run().assert_outcomes(passed=1)


def test_an_entry_without_quality_gains_it_on_update(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = quality_suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=1)
    data = yaml.safe_load(suite.file.read_text())
    del data["benchmarks"][suite.key()]["quality"]
    suite.file.write_text(yaml.safe_dump(data, sort_keys=True))
    set_rel_l2(monkeypatch, 0.5)  # nothing stored: not gated
    suite.run().assert_outcomes(passed=1)
    suite.run("--convperf-update-baselines=all").assert_outcomes(passed=1)
    assert suite.entries()[suite.key()]["quality"]["rel_l2"] == 0.5


@pytest.mark.parametrize(
    ("quality", "problem"),
    [
        ("oops", "field 'quality' must be a mapping"),
        ({"rel_l2": "big"}, "field 'quality.rel_l2' must be a number"),
        ({"rel_l2": -0.1}, "field 'quality.rel_l2' must be >= 0"),
        ({"sqnr_db": True}, "field 'quality.sqnr_db' must be a number"),
        ({"sqnr_db": math.nan}, "field 'quality.sqnr_db' must be a number"),
        ({"snr": 3.0}, "unknown field 'quality.snr'"),
    ],
)
def test_a_corrupt_quality_field_stops_the_session(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    plugin_args: tuple[str, ...],
    quality: object,
    problem: str,
) -> None:
    suite = quality_suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=1)
    suite.edit(suite.key(), quality=quality)
    before = suite.file.read_bytes()
    result = suite.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()  # the key holds brackets, which fnmatch would read as a class
    assert f"{suite.file}: entry '{suite.key()}': {problem}" in err
    assert "Fix: " in err and "The file was left unchanged." in err
    assert suite.file.read_bytes() == before


def test_an_exact_variant_stores_infinite_sqnr(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = quality_suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=1)
    suite.edit(suite.key(), quality={"rel_l2": 0.0, "sqnr_db": math.inf})
    result = suite.run()  # exact before, 40 dB now: a loss
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*rel_l2 0 -> 0.01*sqnr_db inf -> 40 dB*"])


def test_calibrate_creates_entries_with_the_runs_quality(tmp_path: Path) -> None:
    from pytest_convperf.baselines.calibration import calibrate_records, write_calibration
    from pytest_convperf.baselines.store import read_file
    from pytest_convperf.reports.report_files import history_records

    row = {
        "key": "k",
        "module": "m",
        "verdict": "NEW",
        "comparison": {"time_ratio": 0.5, "candidate": {"median": 5e-4}, "reference": {"median": 1e-3}},
        "extra_metrics": {"rel_l2": 0.01, "sqnr_db": 40.0, "other": 3.0},
        "baselines_file": "f.yaml",
        "machine": "box",
        "device_kind": "cpu",
    }
    record = history_records([check_row(row)], when="now", commit=None)[0]
    assert record["quality"] == {"rel_l2": 0.01, "sqnr_db": 40.0}
    path = tmp_path / "box" / "m.yaml"
    record["baselines_file"] = str(path)
    folded = calibrate_records([[record], [record]])
    write_calibration(str(path), "box", folded[str(path)]["checks"])
    assert read_file(path).entries["k"].quality == {"rel_l2": 0.01, "sqnr_db": 40.0}


def test_a_quality_loss_fails_even_when_the_timing_is_inconclusive(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = quality_suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=1)
    # A third of the rounds run at a lower clock: the timing is INCONCLUSIVE.
    times = {"candidate": [0.5 * 1e-3], "reference": [1e-3]}
    clocks = [{"sm_mhz": 1980.0}, {"sm_mhz": 1980.0}, {"sm_mhz": 1200.0}]
    suite.timer.write_text(json.dumps({"times": times, "call_jobs": False, "clocks": clocks}))
    suite.run().assert_outcomes(skipped=1)

    set_rel_l2(monkeypatch, 0.02)
    before = suite.file.read_bytes()
    result = suite.run("--convperf-update-baselines", "--convperf-reason=x")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*quality drift: accuracy against the float conv was lost*"])
    assert suite.file.read_bytes() == before  # inconclusive timing is never recorded
