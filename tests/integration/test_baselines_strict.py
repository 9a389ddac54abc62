"""--convperf-strict (and ini convperf_strict): a check without a baseline fails instead of NEW-passing."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import Suite


def test_strict_fails_new_unless_it_is_being_recorded(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    result = suite.run("--convperf-strict")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*NEW: no baseline entry*--convperf-strict fails checks without a baseline*"]
    )
    suite.run("--convperf-strict", "--convperf-update-baselines=new", "-k", "test_a").assert_outcomes(
        passed=1
    )
    pytester.makeini("[pytest]\nconvperf_strict = true\n")
    result = suite.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_suite.py::test_b*"])
