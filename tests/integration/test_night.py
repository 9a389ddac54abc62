"""The session's verdict at its end: a per-check speed FAIL is decided across the session.

Under ``--convperf-false-alarms=holm`` (the default) the test of a per-check FAIL is reported
"speed FAIL pending" when it runs (never passed, never a warning); the controller then either keeps
it (the test counted failed, exit status 1, FAIL in rows.json) or clears it (SUSPECT, the test
counted passed, exit 0). ``none`` fails the test at once.
"""

from __future__ import annotations

import json

import pytest

from tests.integration._lifecycle import Suite


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]) -> Suite:
    s = Suite(pytester, monkeypatch, plugin_args)
    s.run("--convperf-update-baselines").assert_outcomes(passed=2)
    return s


def _rows(suite: Suite) -> list[dict[str, object]]:
    return list(json.loads((suite.pytester.path / "report" / "rows.json").read_text()))


def test_kept_fail_fails_the_session_naming_the_check(suite: Suite) -> None:
    suite.set_ratio(0.6)  # +20 %: far beyond the 5 % tolerance
    result = suite.run("--convperf-report=report", "-v")
    result.assert_outcomes(failed=2)  # pending when they ran, failed once the session kept them
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*test_suite.py::test_a*SPEED FAIL (pending the session's decision)*",
            "*false alarms: Holm: P(any false FAIL in this session) <= 0.05; 2 checks judged together*",
            "*the session FAILS: 2 speed FAIL(s) kept across the session*",
            "FAILED test_suite.py::test_a*",
            "FAILED test_suite.py::test_b*",
            "*= 2 failed*",
        ]
    )
    out = result.stdout.str()
    assert "SpeedSuspect" not in out and "tonight" not in out and "PASSED" not in out
    # The closing line counts the kept FAILs as failed, none as passed. (Warnings from the
    # environment, e.g. pytester's "Module already imported" assert-rewrite notice, may follow.)
    final = out.strip().splitlines()[-1]
    assert "2 failed" in final and "passed" not in final, final
    rows = _rows(suite)
    assert [r["verdict"] for r in rows] == ["FAIL", "FAIL"]
    assert all(r["night"]["kept"] for r in rows)  # type: ignore[index]
    night = json.loads((suite.pytester.path / "report" / "night.json").read_text())
    assert night["method"] == "holm" and night["m"] == 2 and len(night["fails"]) == 2
    report = (suite.pytester.path / "report" / "report.md").read_text()
    assert "### Session" in report and "speed FAIL kept" in report


def test_cleared_fail_is_a_suspect_not_a_failure(suite: Suite) -> None:
    # Negative control of the controller: the same regression, judged at a night-wide level no
    # p-value of two checks can reach, is cleared: SUSPECT in every report, the session passes.
    suite.set_ratio(0.6)
    result = suite.run("--convperf-report=report", "--convperf-false-alarm-level=1e-300")
    result.assert_outcomes(passed=2)  # pending when they ran, passed once the session cleared them
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["*SUSPECT, not significant across the session (adjusted p *): test_suite.py::test_a*"]
    )
    assert "the session FAILS" not in result.stdout.str()
    rows = _rows(suite)
    assert [r["verdict"] for r in rows] == ["SUSPECT", "SUSPECT"]
    assert all(not r["night"]["kept"] for r in rows)  # type: ignore[index]
    assert all(str(r["message"]).startswith("SUSPECT: slower by its own rule") for r in rows)


def test_bh_is_chosen_in_the_ini(suite: Suite) -> None:
    suite.pytester.makeini("[pytest]\nconvperf_false_alarms = bh\n")
    suite.set_ratio(0.6)
    result = suite.run()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*Benjamini-Hochberg: expected share of false FAILs among FAILs <= 0.05*"])


def test_none_fails_each_test_at_once(suite: Suite) -> None:
    suite.set_ratio(0.6)
    result = suite.run("--convperf-false-alarms=none")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*FAIL (confirmed)*", "*no session-wide control*"])
    assert "the session FAILS" not in result.stdout.str()


def test_an_unknown_method_is_a_usage_error(suite: Suite) -> None:
    result = suite.run("--convperf-false-alarms=bonferroni")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--convperf-false-alarms='bonferroni' is not allowed; use one of: holm, bh, none*"]
    )
