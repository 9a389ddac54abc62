"""Correctness drift: max_abs over 4x the stored value fails the test even inside the tolerance;
recording it needs --convperf-update-baselines=failed and a reason."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import Suite


def test_error_growth_over_4x_fails_and_needs_a_reason_to_record(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines", "-k", "test_a").assert_outcomes(passed=1)
    stored = suite.entries()[suite.key()]["correctness"]["max_abs"]
    assert 0 <= stored < 1e-5
    # An offset of 2e-5 stays inside atol (~1e-4 for this problem) but is far over 4x the stored error.
    suite.set_error(2e-5)
    before = suite.file.read_bytes()
    result = suite.run("-k", "test_a")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*correctness drift: output: max_abs 2*e-05 is over 4x the stored*"])
    assert suite.file.read_bytes() == before
    result = suite.run("--convperf-update-baselines", "-k", "test_a")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*recording larger errors needs --convperf-reason=TEXT*"])
    suite.run(
        "--convperf-update-baselines", "--convperf-reason=new rounding", "-k", "test_a"
    ).assert_outcomes(passed=1)
    assert suite.entries()[suite.key()]["correctness"]["max_abs"] == pytest.approx(2e-5, rel=0.05)
    suite.run("-k", "test_a").assert_outcomes(passed=1)


def test_tolerance_breach_fails_and_is_never_recorded(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.set_error(0.1)
    result = suite.run("--convperf-update-baselines", "--convperf-reason=x", "-k", "test_a")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["CORRECTNESS_FAIL (1)"])
    assert not suite.file.exists()
