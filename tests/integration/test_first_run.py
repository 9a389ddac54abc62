"""A new user's first runs (issue 16 item 3-4): the header says where baselines live and whether they
exist yet, NEW checks are one line per module, the recording run does not ask to record, verdict
lines appear per check (complete lines: pytester's output is not a terminal) and -q silences them;
the ``convperf`` fixture implies the marker."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import MACHINE, Suite, subprocess_env


def test_first_run_then_the_recording_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    folder = pytester.path / "baselines" / MACHINE
    first = suite.run()
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(
        [
            f"convperf: device cpu (*) (--convperf-device=cpu), machine {MACHINE}, update no, timer fake*",
            f"convperf: baselines {folder} (does not exist yet: checks report NEW; record them with "
            "--convperf-update-baselines=new)",
            "  NEW  test_a?*?  speedup 2.000x*cand 500.0 us  ref 1.000 ms  (* rounds)",
            "*convperf: NEW 2*",
            "timer: fake timer*",
            "NEW (2)",
            "  test_suite: 2 new checks, speedup 2.000x (not recorded: "
            "--convperf-update-baselines=new records*",
        ]
    )
    recording = suite.run("--convperf-update-baselines")
    recording.assert_outcomes(passed=2)
    assert "Record it with" not in recording.stdout.str()
    recording.stdout.fnmatch_lines(
        [
            "*(does not exist yet: this run records the checks it selects there)",
            "*convperf: NEW 2 (2 recorded)*",
            "timer: fake timer*",
            "NEW (2): 2 recorded as the new baseline by --convperf-update-baselines",
        ]
    )
    again = suite.run("-q")
    again.assert_outcomes(passed=2)
    assert "  PASS  test_a" not in again.stdout.str()  # -q: no verdict lines
    verbose = suite.run("-v")
    verbose.stdout.fnmatch_lines(
        [f"convperf: baselines {folder} (1 file)", "  PASS  test_a?*?  speedup 2.000x*"]
    )


def test_the_fixture_implies_the_marker(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    pytester.makepyfile(
        test_unmarked="""
def test_uses_the_fixture(convperf):
    pass  # disabled mode (issue 24.5): without --convperf the test runs, its checks correctness only
"""
    )
    pytester.runpytest(*plugin_args, "-rs").assert_outcomes(passed=1)
    pytester.runpytest(*plugin_args, "-m", "convperf", "--collect-only", "-q").stdout.fnmatch_lines(
        ["test_unmarked.py::test_uses_the_fixture"]
    )


def test_verdict_lines_get_past_pytests_capture_and_come_from_the_xdist_controller(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    """A separate process, so pytest's fd capture is real (checks write while a test runs)."""
    Suite(pytester, monkeypatch, plugin_args)
    subprocess_env(monkeypatch)
    base = (*plugin_args, "--convperf", f"--convperf-machine={MACHINE}", "--convperf-device=cpu")
    plain = pytester.runpytest_subprocess(*base, "test_suite.py")
    plain.assert_outcomes(passed=2)
    plain.stdout.fnmatch_lines(["test_suite.py ", "  NEW  test_a?*?  speedup 2.000x*", "test_suite.py .*"])
    pytest.importorskip("xdist")
    dist = pytester.runpytest_subprocess(*base, "test_suite.py", "-n", "2")
    dist.assert_outcomes(passed=2)
    dist.stdout.fnmatch_lines(["  NEW  test_?*?  speedup 2.000x*", "  NEW  test_?*?  speedup 2.000x*"])


def test_a_log_gets_the_sessions_pace(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    # Issue 38.2: checks done / total and an estimate in a CI log (pytester's output is no terminal).
    from pytest_convperf.reports import progress

    monkeypatch.setattr(progress, "PACE_EVERY_CHECKS", 1)
    suite = Suite(pytester, monkeypatch, plugin_args)
    result = suite.run()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "convperf: 1/2 checks, 1/2 tests done in * s; about * left",
            "convperf: 2/2 checks, 2/2 tests done in * s; about 0 s left",
        ]
    )
