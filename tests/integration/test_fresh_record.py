"""A recorded entry is the median of K pytest processes (``--convperf-record-runs``, night/fresh_record.py):
one process that caught the machine in a lucky state no longer sets the baseline."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import Suite, replay_conftest, subprocess_env

# This session's process reads 0.40 (the lucky one); the two fresh processes read 0.50 and 0.52.
RATIOS = [0.40, 0.50, 0.52]


def _suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]) -> Suite:
    suite = Suite(pytester, monkeypatch, plugin_args)
    subprocess_env(monkeypatch)
    pytester.makeconftest(replay_conftest(RATIOS))
    return suite


def test_the_entry_is_the_median_of_three_processes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = _suite(pytester, monkeypatch, plugin_args)
    result = suite.run("--convperf-update-baselines", "--convperf-record-runs=3", "-k", "test_a")
    result.assert_outcomes(passed=1)
    entry = suite.entries()[suite.key()]
    assert entry["time_ratio"] == pytest.approx(0.50, rel=1e-3), entry
    assert entry["ref_runs"] == 3, entry
    assert (pytester.path / "run-counter.txt").read_text() == "3"  # this process and two fresh ones
    result.stdout.fnmatch_lines(["*1 recorded entry measured again in 2 fresh pytest process(es)*"])
    record = (pytester.path / "convperf-update.md").read_text()
    assert "(new) -> 0.5 (speedup 2x), the median of 3 pytest processes" in record, record


def test_one_process_when_asked_and_under_the_fake_timer_by_default(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = _suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines", "-k", "test_a").assert_outcomes(passed=1)
    entry = suite.entries()[suite.key()]
    assert entry["time_ratio"] == pytest.approx(0.40, rel=1e-3) and "ref_runs" not in entry, entry
    assert (pytester.path / "run-counter.txt").read_text() == "1"


def test_a_bad_count_is_refused_in_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    result = suite.run("--convperf-update-baselines", "--convperf-record-runs=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--convperf-record-runs='0' is not allowed; give a whole number*"])
