"""Negative control (issue 5): the correct CPU twin slowed by 25 % (kernels._controls.cpu.slowed) is
reported FAIL against the unslowed candidate's baseline. Real CPU timing, no fake timer.

The gate runs with a 2 % noise floor (--convperf-noise-floor=0.02, the default CPU floor since the
harness's allocator bias was removed, issue 24; before, 4 % made a 25 % regression ADVISORY against
a one-run baseline); test_false_alarm shows the default floor never fails an unchanged one."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import CpuSuite, assert_speed_fails

pytest.importorskip("kernels._controls.cpu")


def test_25_percent_slowed_candidate_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = CpuSuite(pytester, monkeypatch, plugin_args)
    suite.noise_floor = "0.02"
    suite.run("--convperf-update-baselines").assert_outcomes(passed=1)
    before = suite.file.read_bytes()
    assert b"witness:" in before  # the reference timed alone, the machine's witness (issue 36)
    suite.slow_down(0.25)
    result = suite.run()
    assert_speed_fails(result, 1)  # kept across the session: its test counts failed
    result.stdout.fnmatch_lines(["*FAIL (confirmed): slower than the baseline by more than 5.0 %*"])
    assert suite.file.read_bytes() == before
