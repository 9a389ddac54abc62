"""Issue 36 item 4 end to end: the recording stores each side's SM clock in its entry, and a later
session whose candidate ran at a lower clock is judged in cycles (time x SM clock), not FAILed for
reading slower in time; at equal clocks the same slowdown in time FAILs. Fake timer and a fake
NVML reader (the timer file's ``slot_clocks``)."""

from __future__ import annotations

import json

import pytest

from tests.integration._lifecycle import REF_S, Suite, assert_speed_fails

FULL, LOW = 1980.0, 1500.0


def timed(suite: Suite, ratio: float, cand_mhz: float) -> None:
    """Every round: the candidate at ``ratio`` x the reference's time, read at ``cand_mhz``."""
    times = {"candidate": [ratio * REF_S], "reference": [REF_S]}
    slots = {"candidate": [cand_mhz], "reference": [FULL]}
    suite.timer.write_text(json.dumps({"times": times, "call_jobs": False, "slot_clocks": slots}))


def test_a_lower_clock_reads_slower_in_time_but_same_in_cycles(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    timed(suite, 0.5, FULL)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=2)
    assert suite.entries()[suite.key()]["sm_mhz"] == {"candidate": FULL, "reference": FULL}
    timed(suite, 0.5 * FULL / LOW, LOW)  # the same code at a lower clock: 1.32x the time
    suite.run("--convperf-report=rep").assert_outcomes(passed=2)
    rows = json.loads((pytester.path / "rep" / "rows.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    messages = [json.dumps(row) for row in rows]
    # The row's message shows both ratios: judged in cycles, the time ratio and the clocks beside it.
    assert len(messages) == 2, messages
    for text in messages:
        assert '"verdict": "PASS"' in text and "delta +0.0 % in cycles" in text, text
        assert "in time +32.0 %" in text and "SM clock candidate 1980 -> 1500 MHz" in text, text
    timed(suite, 0.5 * FULL / LOW, FULL)  # 1.32x the time at the recording's clock: a regression
    assert_speed_fails(suite.run(), 2)
