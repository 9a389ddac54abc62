"""Issue 15, verdicts, through whole sessions: a candidate too slow for a CI still FAILs."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import Suite


def test_huge_regression_too_slow_for_a_ci_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines=new", "-k", "test_a").assert_outcomes(passed=1)
    # 10 s per call (the reference takes 1 ms): under 6 rounds fit in the fake timer's 4 x 5 s cap.
    suite.set_ratio(10_000.0)
    result = suite.run("-k", "test_a")
    result.assert_outcomes(failed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*FAIL (few rounds, confirmed)*"])
