"""A partial update (-k, node ids) touches only the selected checks; other entries survive untouched."""

from __future__ import annotations

import pytest
import yaml

from tests._lifecycle import Suite


def test_partial_update_keeps_unselected_and_unknown_entries(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=2)
    # An entry whose test no longer exists (renamed, or on another branch) is never dropped.
    data = yaml.safe_load(suite.file.read_text())
    data["benchmarks"]["test_gone[x]"] = dict(data["benchmarks"][suite.key("test_b")])
    suite.file.write_text(yaml.safe_dump(data, sort_keys=True))
    b_before = suite.entries()[suite.key("test_b")]
    suite.set_ratio(0.6)
    result = suite.run("--convperf-update-baselines", "--convperf-reason=accepted", "-k", "test_a")
    result.assert_outcomes(passed=1)
    entries = suite.entries()
    assert set(entries) == {suite.key("test_a"), suite.key("test_b"), "test_gone[x]"}
    assert entries[suite.key("test_a")]["time_ratio"] == pytest.approx(0.6)
    assert entries[suite.key("test_b")] == b_before
    # By node id as well.
    nodeid = f"test_suite.py::{suite.key('test_b')}"
    suite.run("--convperf-update-baselines", "--convperf-reason=accepted", nodeid).assert_outcomes(passed=1)
    assert suite.entries()[suite.key("test_b")]["time_ratio"] == pytest.approx(0.6)
    assert "test_gone[x]" in suite.entries()
