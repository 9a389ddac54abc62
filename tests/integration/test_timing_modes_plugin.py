"""End to end: the plugin records each entry's timing mode, and a stored mode that differs from
the measurement's is STALE naming the change (the rules themselves:
``tests/unit/baselines/test_store_timing_modes.py``)."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import Suite


def test_the_plugin_records_the_mode_and_a_hand_changed_mode_is_stale(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=2)
    key = suite.key("test_a")
    assert suite.entries()[key]["mode"] == "fake"  # the fake timer's mode; a GPU stores cold/graph
    suite.edit(key, mode="graph")
    suite.set_ratio(0.9)  # +80 %: a FAIL if it were judged
    result = suite.run("-k", "test_a")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["STALE (1)", "*STALE: timing changed (mode graph -> fake)*"])
    # The update re-records the entry in the mode now used (same ratio: no reason needed).
    suite.set_ratio(0.5)
    suite.run("--convperf-update-baselines", "-k", "test_a").assert_outcomes(passed=1)
    assert suite.entries()[key]["mode"] == "fake"
