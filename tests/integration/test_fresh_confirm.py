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
        first = not os.path.exists("fresh-started")
        open("fresh-started", "a").close()
        if os.environ.get("CRASH_FRESH") or (first and os.environ.get("CRASH_FIRST_FRESH")):
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


@pytest.mark.parametrize(
    ("fresh", "ret", "counts", "verdict", "says"),
    [
        # +20 % here (screen and its confirm agree), but not in a fresh process: this process's offset.
        (0.5, pytest.ExitCode.OK, "0 still FAIL, 2 cleared", "PASS", "cleared by 2 fresh pytest process(es)"),
        # +20 % in every process: the kernel. FAIL, kept by the night with the fresh p-value.
        (0.6, pytest.ExitCode.TESTS_FAILED, "2 still FAIL, 0 cleared", "FAIL", "confirmed again in 2 fresh"),
    ],
)
def test_the_fresh_processes_decide_a_fail_of_this_process(
    suite: Suite, fresh: float, ret: pytest.ExitCode, counts: str, verdict: str, says: str
) -> None:
    suite.set_ratio(0.6)
    fresh_ratio(suite, fresh)
    result = suite.run("--convperf-report=report")
    assert result.ret == ret
    result.stdout.fnmatch_lines(
        [f"*2 speed FAIL(s) confirmed again in up to 2 fresh pytest processes: {counts} in * s"]
    )  # its seconds: what the GPU window's night summary reports as the confirm's cost
    rows = _rows(suite)
    assert [r["verdict"] for r in rows] == [verdict, verdict]
    assert all(says in str(r["message"]) for r in rows)
    assert all("FAIL (confirmed)" in str(r["message"]) for r in rows)  # what this process had said
    assert all(r["night"]["kept"] is (verdict == "FAIL") for r in rows)  # type: ignore[index]


def test_one_fresh_process_is_enough_when_the_other_breaks(
    suite: Suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRASH_FIRST_FRESH", "1")
    suite.set_ratio(0.6)
    fresh_ratio(suite, 0.5)
    result = suite.run("--convperf-report=report")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*0 still FAIL, 2 cleared (the fresh pytest process exited*"])
    rows = _rows(suite)
    assert all("cleared by 1 fresh pytest process(es)" in str(r["message"]) for r in rows)


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
