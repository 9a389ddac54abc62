"""A partial update (-k, node ids) touches only the selected checks; other entries survive untouched."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.integration._lifecycle import Suite
from tests.rows import check_row


def test_partial_update_keeps_unselected_and_unknown_entries(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines").assert_outcomes(passed=2)
    # An entry whose test no longer exists (renamed, or on another branch) is never dropped.
    data = yaml.safe_load(suite.file.read_text())
    # A deep copy: a shallow one shares the nested maps, which yaml.safe_dump writes as an anchor and
    # an alias, and baseline files refuse those (issue 37.10).
    data["benchmarks"]["test_gone[x]"] = copy.deepcopy(data["benchmarks"][suite.key("test_b")])
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


def test_one_bad_target_file_stops_the_update_before_any_write(tmp_path: Path) -> None:
    from pytest_convperf.baselines.updates import apply_updates
    from pytest_convperf.core.config import ConvperfConfig
    from pytest_convperf.judge.entry import Entry

    entry = Entry(time_ratio=0.5, noise=0.01, us_candidate=5.0, us_reference=10.0).to_yaml()
    cfg = ConvperfConfig(
        enabled=True, update=frozenset({"new"}), baselines_dir=tmp_path / "bl", rootdir=tmp_path
    )
    rows = [
        {
            "key": "test_x",
            "module": mod,
            "machine": "box",
            "nodeid": f"{mod}.py::test_x",
            "verdict": "NEW",
            "update": {"action": "write", "entry": entry},
        }
        for mod in ("test_a", "test_b")
    ]
    bad = tmp_path / "bl" / "box" / "test_b.yaml"
    bad.parent.mkdir(parents=True)
    bad.write_text("benchmarks: [\n")
    with pytest.raises(pytest.UsageError, match=r"test_b\.yaml"):
        apply_updates(cfg, [check_row(row) for row in rows], tmp_path)
    assert not (tmp_path / "bl" / "box" / "test_a.yaml").exists()
    assert bad.read_text() == "benchmarks: [\n"
