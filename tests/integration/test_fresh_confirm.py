"""A speed FAIL is confirmed again in a fresh pytest process before the night decides it.

The fake timer replays one ratio per process: ``fresh-timer.json`` is what the fresh process
sees (the conftest points the timer there when ``--convperf-confirm-run`` is given), so a slow
offset of the first process alone is cleared, and a slowdown both processes see stays FAIL.
"""

from __future__ import annotations

import json

import pytest

from tests.integration._lifecycle import REF_S, Suite

CONFTEST = """
import os

def pytest_configure(config):
    if config.getoption("convperf_confirm_run", default=None):
        if os.environ.get("CRASH_FRESH"):
            raise RuntimeError("the fresh process broke")
        os.environ["CONVPERF_FAKE_TIMER"] = os.path.abspath("fresh-timer.json")
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]) -> Suite:
    s = Suite(pytester, monkeypatch, plugin_args)
    s.run("--convperf-update-baselines").assert_outcomes(passed=2)
    pytester.makeconftest(CONFTEST)
    return s


def fresh_ratio(suite: Suite, ratio: float) -> None:
    times = {"candidate": [ratio * REF_S], "reference": [REF_S]}
    (suite.pytester.path / "fresh-timer.json").write_text(json.dumps({"times": times, "call_jobs": False}))


def _rows(suite: Suite) -> list[dict[str, object]]:
    return list(json.loads((suite.pytester.path / "report" / "rows.json").read_text()))


def test_a_slowdown_of_this_process_alone_is_cleared_by_the_fresh_one(suite: Suite) -> None:
    suite.set_ratio(0.6)  # +20 % in this process (screen and its confirm agree) ...
    fresh_ratio(suite, 0.5)  # ... but not in a fresh one: this process's offset, not the kernel
    result = suite.run("--convperf-report=report")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["*2 speed FAIL(s) confirmed again in up to 2 fresh pytest processes: 0 still FAIL, 2 cleared*"]
    )
    rows = _rows(suite)
    assert [r["verdict"] for r in rows] == ["PASS", "PASS"]
    assert all("cleared by 2 fresh pytest process(es)" in str(r["message"]) for r in rows)
    assert all("FAIL (confirmed)" in str(r["message"]) for r in rows)  # what this process had said


def test_a_slowdown_both_processes_see_stays_fail_with_the_fresh_p_value(suite: Suite) -> None:
    suite.set_ratio(0.6)
    fresh_ratio(suite, 0.6)
    result = suite.run("--convperf-report=report")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*confirmed again in up to 2 fresh pytest processes: 2 still FAIL, 0 cleared*"]
    )
    rows = _rows(suite)
    assert [r["verdict"] for r in rows] == ["FAIL", "FAIL"]
    assert all("confirmed again in 2 fresh pytest process(es)" in str(r["message"]) for r in rows)
    assert all(r["night"]["kept"] for r in rows)  # type: ignore[index]


def test_confirm_in_process_skips_the_fresh_process(suite: Suite) -> None:
    suite.set_ratio(0.6)
    fresh_ratio(suite, 0.5)  # would clear them, but no fresh process runs
    result = suite.run("--convperf-report=report", "--convperf-confirm=process")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "fresh pytest process" not in result.stdout.str()


def test_a_broken_fresh_process_keeps_the_fail_and_says_so(
    suite: Suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRASH_FRESH", "1")
    suite.set_ratio(0.6)
    result = suite.run("--convperf-report=report")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # never cleared by a confirm that did not run
    rows = _rows(suite)
    assert [r["verdict"] for r in rows] == ["FAIL", "FAIL"]
    assert all(
        "not confirmed in a fresh process: the fresh pytest process exited" in str(r["message"]) for r in rows
    )
    assert all("the fresh process broke" in str(r["message"]) for r in rows)


def test_an_unknown_confirm_place_is_a_usage_error(suite: Suite) -> None:
    result = suite.run("--convperf-confirm=elsewhere")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--convperf-confirm='elsewhere' is not allowed; use fresh*"])
