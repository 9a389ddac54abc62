"""IMPROVED: faster beyond tolerance passes with a prompt; only =improved (or all) ratchets it."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import Suite


def test_improvement_is_reported_and_ratcheted_only_on_request(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines=new").assert_outcomes(passed=2)
    suite.set_ratio(0.4)
    result = suite.run()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["IMPROVED (2)", "*IMPROVED (confirmed): faster than the baseline*delta -20.0 %*"]
    )
    before = suite.file.read_bytes()
    # The default update kinds (failed,new) leave improvements alone.
    suite.run("--convperf-update-baselines").assert_outcomes(passed=2)
    assert suite.file.read_bytes() == before
    # =improved records the faster ratio; no reason is needed for a faster one.
    suite.run("--convperf-update-baselines=improved", "-k", "test_a").assert_outcomes(passed=1)
    entries = suite.entries()
    assert entries[suite.key("test_a")]["time_ratio"] == pytest.approx(0.4)
    assert entries[suite.key("test_b")]["time_ratio"] == pytest.approx(0.5)
    assert "reason" not in entries[suite.key("test_a")].get("updated", {})
