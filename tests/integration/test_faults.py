"""Issue 15 item 13: a hung check fails on its time limit; a crash loses no result already measured."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from pytest_convperf.check.faults import CheckTimeout, deadline
from pytest_convperf.measure.rule import StopRule
from tests.integration._lifecycle import Suite, subprocess_env

HANG = """
import time

import pytest
import torch.nn.functional as F
from pytest_convperf.core.problem import Conv2dProblem

P = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=3, padding=1)
CALLS = []


def sleepy(x, w, b, *args):
    CALLS.append(1)
    if len(CALLS) > 2:  # correct in the correctness run, then hangs
        time.sleep(60)
    return F.conv2d(x, w, b, *args)


@pytest.mark.convperf
def test_hang(convperf):
    convperf.check(sleepy, P)
"""


def test_a_hung_check_fails_on_its_time_limit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    monkeypatch.delenv("CONVPERF_FAKE_TIMER")
    pytester.makepyfile(test_hang=HANG)
    report = pytester.path / "report"
    result = suite.run("test_hang.py", "--convperf-check-timeout=3", f"--convperf-report={report}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*ran past its 3 s limit and was stopped during *(*)*--convperf-check-timeout*"]
    )
    assert result.duration < 50
    # The stopped check leaves its row: verdict, the limit, how far it got (issue 25.4).
    (row,) = json.loads((report / "rows.json").read_text())
    assert row["verdict"] == "TIMEOUT" and row["facts"]["timeout"]["limit_s"] == 3
    # It hangs in the first measurement; a box loaded enough stops it in correctness already.
    assert row["facts"]["timeout"]["stage"] in ("the first measurement", "correctness")
    assert "TIMEOUT" in (report / "report.md").read_text()
    assert [json.loads(line)["verdict"] for line in (report / "rows.journal.jsonl").open()] == ["TIMEOUT"]


STUBBORN = """
import signal
import time

import pytest
import torch.nn.functional as F
from pytest_convperf.core.problem import Conv2dProblem

P = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=3, padding=1)
CALLS = []


def stubborn(x, w, b, *args):
    CALLS.append(1)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)  # the check's alarm: ignored
    if len(CALLS) > 2:  # correct in the correctness run, then hangs and swallows every stop
        while True:
            try:
                time.sleep(60)
            except BaseException:
                pass
    return F.conv2d(x, w, b, *args)


def test_stubborn(convperf):
    convperf.check(stubborn, P)
"""


def test_a_candidate_that_swallows_the_stop_is_ended_by_the_watchdog_with_its_row(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    Suite(pytester, monkeypatch, plugin_args)
    subprocess_env(monkeypatch)
    monkeypatch.delenv("CONVPERF_FAKE_TIMER")
    pytester.makepyfile(test_stubborn=STUBBORN)
    report = pytester.path / "report"
    result = pytester.run(
        sys.executable, "-m", "pytest", "test_stubborn.py", "--convperf", "--convperf-machine=testbox",
        "--convperf-device=cpu", f"--convperf-report={report}", "--convperf-check-timeout=5",
        "-p", "no:cacheprovider", "-p", "no:xdist", timeout=120,
    )  # fmt: skip
    assert result.ret == 124
    result.stderr.fnmatch_lines(["*ran past its 5 s limit*did not stop*the process is ended (exit 124)*"])
    (row,) = [json.loads(line) for line in (report / "rows.journal.jsonl").open()]
    assert row["verdict"] == "TIMEOUT" and row["nodeid"].endswith("test_stubborn")
    assert row["facts"]["timeout"]["limit_s"] == 5


def test_the_default_limit_comes_from_the_round_caps() -> None:
    cpu = StopRule(max_time_s=2.0, warmup_cap_s=1.0)
    assert cpu.check_timeout_s() == 3 * ((1 + 8) + (1 + 24))
    assert StopRule().check_timeout_s() == 3 * ((2 + 20) + (2 + 60))


def test_deadline_restores_the_previous_handler_and_can_be_off() -> None:
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(CheckTimeout, match=r"0\.05 s limit"), deadline(0.05, "x"):
        __import__("time").sleep(5)
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
    with deadline(0, "x") as why:
        assert why is not None and "off" in why


CRASH = """
import ctypes
import os

import pytest
import torch.nn.functional as F
from pytest_convperf.core.problem import Conv2dProblem

P = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=3, padding=1)


def test_a(convperf):
    convperf.check(F.conv2d, P)


def test_b_segfaults(convperf):
    ctypes.string_at(0)  # a kernel that faults: SIGSEGV kills the process


def test_c(convperf):
    convperf.check(F.conv2d, P)
"""


def _journal_keys(report: Path) -> list[str]:
    path = report / "rows.journal.jsonl"
    return [json.loads(line)["nodeid"] for line in path.read_text().splitlines() if line.strip()]


def _run_crash_suite(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...], *args: str
) -> tuple[pytest.RunResult, Path]:
    """The crashing suite in a subprocess (a segfault must not end this test run); its report dir."""
    Suite(pytester, monkeypatch, plugin_args)
    subprocess_env(monkeypatch)
    pytester.makepyfile(test_crash=CRASH)
    report = pytester.path / "report"
    result = pytester.run(
        sys.executable,
        "-m",
        "pytest",
        "test_crash.py",
        "--convperf",
        "--convperf-machine=testbox",
        "--convperf-device=cpu",
        f"--convperf-report={report}",
        "-p",
        "no:cacheprovider",
        *args,
    )
    return result, report


def test_a_segfault_without_xdist_loses_no_measured_row(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    result, report = _run_crash_suite(pytester, monkeypatch, plugin_args, "-p", "no:xdist")
    assert result.ret != 0  # the process died
    assert [k.split("::")[-1] for k in _journal_keys(report)] == ["test_a"]


def test_a_segfault_under_xdist_fails_its_test_and_the_session_goes_on(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    """docs/running.md's way to run each test in isolation: a crashed worker is replaced."""
    result, report = _run_crash_suite(pytester, monkeypatch, plugin_args, "-n", "1", "--max-worker-restart=5")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*test_b_segfaults*crashed*"])
    rows = json.loads((report / "rows.json").read_text())
    assert sorted(r["nodeid"].split("::")[-1] for r in rows) == ["test_a", "test_c"]


def test_the_limit_grows_for_a_slow_candidate_but_not_for_a_hung_one() -> None:
    """A candidate of 0.2 s per call gets 3 x 17 x 0.2 s more than the limit; a stuck call none."""
    import time

    from pytest_convperf.check.faults import CheckProgress

    slow = CheckProgress()
    slow.observe_round("warm-up", 0, ("candidate", "reference"), (0.2, 0.001))
    assert slow.limit(1.0) == pytest.approx(1.0 + 3 * 17 * 0.2)
    with deadline(0.3, "slow", slow):
        time.sleep(1.0)  # past 0.3 s, within the grown limit: not stopped
    stuck = pytest.raises(CheckTimeout, match=r"its 0.3 s limit and was stopped during starting")
    with stuck, deadline(0.3, "stuck", CheckProgress()):
        time.sleep(5)


SLOW = """
import time

import torch.nn.functional as F
from pytest_convperf.core.problem import Conv2dProblem

P = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=3, padding=1)


def slow(x, w, b, *args):
    time.sleep(0.3)  # every call: slow, never hung
    return F.conv2d(x, w, b, *args)


def test_slow(convperf):
    convperf.check(slow, P)
"""


def test_a_slow_candidate_completes_with_its_numbers_instead_of_failing_as_hung(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    monkeypatch.delenv("CONVPERF_FAKE_TIMER")
    monkeypatch.setenv("CONVPERF_CPU_THREADS", "2")  # the wall clock: a sleeping call counts
    pytester.makepyfile(test_slow=SLOW)
    report = pytester.path / "report"
    result = suite.run("test_slow.py", "--convperf-check-timeout=3", f"--convperf-report={report}")
    (row,) = json.loads((report / "rows.json").read_text())
    assert row["verdict"] != "TIMEOUT", row["message"]
    assert (
        row["comparison"]["n_rounds"] >= 1 and row["comparison"]["time_ratio"] > 2
    )  # its numbers: a slow candidate
    result.assert_outcomes(passed=1)


def test_after_a_segfault_report_does_not_claim_an_update_that_was_never_written(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    plugin_args: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 25.5: the journal's rows carry the planned write; the session died before writing it."""
    from pytest_convperf.__main__ import main

    result, report = _run_crash_suite(
        pytester, monkeypatch, plugin_args, "-p", "no:xdist", "--convperf-update-baselines"
    )
    assert result.ret != 0 and not list(pytester.path.rglob("*.yaml"))  # no baseline was written
    assert main(["report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "recorded as the new baseline" not in out
    assert "NEW (1): 1 planned as the new baseline but NOT written" in out


# A plugin that records a row of its own during a check (a whole-model comparison, through the
# public ``convperf.judge``), then holds the check past its limit.
ROW_OF_ITS_OWN = """
import time


def pytest_convperf_check_timed(convperf, context, comparison):
    convperf.judge(comparison, name="whole-model", phase="forward", confirm=lambda n: comparison)
    time.sleep(60)  # the check's limit stops this
"""


def test_a_check_stopped_after_another_row_of_its_test_still_leaves_its_timeout_row(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    # Issue 39.4: whether the check was judged is its own record, not "its test has more rows than
    # when it started": the hook's row is not this check's, so the check that ran out of time has
    # no row yet and gets its TIMEOUT row (counting rows said "judged already" and left it out).
    suite = Suite(pytester, monkeypatch, plugin_args)
    pytester.makeconftest(ROW_OF_ITS_OWN)
    report = pytester.path / "report"
    result = suite.run("test_suite.py::test_a", "--convperf-check-timeout=5", f"--convperf-report={report}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ran past its 5 s limit*"])
    rows = json.loads((report / "rows.json").read_text())
    verdicts = {row["problem"] == "whole-model": row["verdict"] for row in rows}
    assert len(rows) == 2 and verdicts == {True: "NEW", False: "TIMEOUT"}  # the hook's row, the check's
