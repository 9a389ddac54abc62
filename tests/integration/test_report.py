"""--convperf-report=DIR: report.md (+ $GITHUB_STEP_SUMMARY), results.json that pytest-benchmark's own
``compare`` reads, history.jsonl (one line per check per run), speedup.png; JUnit properties."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from pytest_convperf.core.results import Verdict
from pytest_convperf.reports.report import markdown, terminal_lines
from pytest_convperf.reports.report_files import plot_speedups
from pytest_convperf.reports.report_row import grouped
from tests.integration._lifecycle import Suite
from tests.rows import check_row


def test_report_dir_files_and_junit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    suite.run("--convperf-update-baselines", "-k", "test_a").assert_outcomes(passed=1)
    summary = pytester.path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    report = pytester.path / "rep"
    for _ in range(2):
        result = suite.run(f"--convperf-report={report}", f"--junitxml={pytester.path / 'junit.xml'}")
        result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"convperf report: {report}"])

    md = (report / "report.md").read_text()
    assert "### PASS (1)" in md and "### NEW (1)" in md and "| check | speedup |" in md
    assert "2.000x" in md
    text = summary.read_text()
    assert text.startswith("earlier step\n") and text.count("## convperf report") == 2

    history = [json.loads(line) for line in (report / "history.jsonl").read_text().splitlines()]
    assert len(history) == 4  # 2 checks x 2 runs
    assert {h["verdict"] for h in history} == {"PASS", "NEW"}
    assert all(h["time_ratio"] == pytest.approx(0.5) and h["machine"] == "testbox" for h in history)

    data = json.loads((report / "results.json").read_text())
    assert {"machine_info", "commit_info", "benchmarks", "datetime", "version"} <= set(data)
    assert data["machine_info"]["machine"] == "testbox" and "torch" in data["machine_info"]
    bench = data["benchmarks"][0]
    assert bench["stats"]["median"] > 0 and bench["extra_info"]["convperf_verdict"] in ("PASS", "NEW")
    assert len(data["benchmarks"]) == 4  # candidate and reference per check
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(report / "results.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Failed to load" not in proc.stdout + proc.stderr
    assert "[candidate]" in proc.stdout and "[reference]" in proc.stdout

    matplotlib = pytest.importorskip("matplotlib")
    assert matplotlib is not None
    assert (report / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    props = {
        str(p.get("name")): str(p.get("value"))
        for p in ET.parse(pytester.path / "junit.xml").iter("property")
    }
    verdicts = {k: v for k, v in props.items() if k.endswith(".verdict")}
    assert sorted(verdicts.values()) == ["NEW", "PASS"]
    assert any(k.endswith(".speedup") and v == "2" for k, v in props.items())


ROW = check_row(
    {
        "key": "test_x[p]",
        "module": "test_m",
        "nodeid": "test_m.py::test_x[p]",
        "verdict": "FAIL",
        "message": "FAIL (confirmed): slower\nsecond line",
        "comparison": {
            "time_ratio": 0.6,
            "time_ratio_ci": [0.59, 0.61],
            "n_rounds": 21,
            "se": 0.01,
            "candidate": {"median": 6e-4, "samples": [6e-4]},
            "reference": {"median": 1e-3, "samples": [1e-3]},
        },
        "decision": {"delta": 0.2, "delta_ci": [0.15, 0.25], "mde": 0.08},
        "baseline": {"time_ratio": 0.5, "noise": 0.01, "us": {"candidate": 500.0, "reference": 1000.0}},
    }
)


def test_report_data_is_grouped_most_urgent_first() -> None:
    rows = [
        ROW,
        dataclasses.replace(ROW, key="test_y[p]", verdict=Verdict.PASS),
        dataclasses.replace(ROW, key="test_z", verdict=Verdict.NEW),
    ]
    assert [v for v, _ in grouped(rows)] == ["FAIL", "NEW", "PASS"]
    lines = terminal_lines(rows)
    assert lines[0] == "FAIL (1)"
    assert "speedup 1.667x [1.639, 1.695]  baseline 2.000x  delta +20.0 % [+15.0, +25.0]" in lines[1]
    assert lines[2].strip() == "FAIL (confirmed): slower"
    assert (
        "| ` test_m::test_x[p] ` | 1.667x [1.639, 1.695] | 2.000x | +20.0 % [+15.0, +25.0] | 600.0 | 1000 "
        "| 8.0% |" in (markdown(rows))
    )


def test_plot_without_matplotlib_is_a_note(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    from pathlib import Path

    note = plot_speedups([ROW], Path(str(tmp_path)) / "speedup.png")
    assert note is not None and "matplotlib is not installed" in note


def test_rows_timed_by_the_fake_timer_say_so() -> None:
    fake = dataclasses.replace(ROW, facts={"timer": "fake"})
    assert terminal_lines([fake])[0].startswith("timer: fake timer")
    assert "**fake timer**" in markdown([fake])
    assert not any("fake" in line for line in terminal_lines([ROW]))
    assert "fake timer" not in markdown([ROW])


def test_history_takes_ratio_and_times_from_the_same_final_comparison() -> None:
    from pytest_convperf.reports.report_files import history_records

    confirm = {
        "time_ratio": 0.7,
        "se": 0.005,
        "n_rounds": 63,
        "candidate": {"median": 7e-4, "samples": [7e-4]},
        "reference": {"median": 1e-3, "samples": [1e-3]},
    }
    # The decision's confirm is a Comparison's dict form (Decision.to_dict).
    full = check_row({"comparison": confirm}).comparison
    assert full is not None
    assert ROW.decision is not None
    row = dataclasses.replace(ROW, decision=dataclasses.replace(ROW.decision, confirm=full))
    (rec,) = history_records([row], when="now", commit=None)
    assert rec["time_ratio"] == pytest.approx(0.7) and rec["ln_ratio"] == pytest.approx(math.log(0.7))
    assert rec["us"] == {"candidate": pytest.approx(700.0), "reference": pytest.approx(1000.0)}
    assert (rec["se"], rec["n_rounds"]) == (0.005, 63)
    (plain,) = history_records([ROW], when="now", commit=None)
    assert plain["time_ratio"] == pytest.approx(0.6) and plain["us"]["candidate"] == pytest.approx(600.0)


def test_a_corrupt_downloaded_history_costs_no_report_of_the_night(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    # Issue 25.3: the nightly workflow downloads history.jsonl from an earlier run. Before, one
    # line that is not a JSON object stopped the end of the session (AttributeError): rows.json,
    # report.md, night.json and results.json were not written. Now each bad line is named in the
    # terminal summary, and tonight's records start on a line of their own after a cut-off one.
    suite = Suite(pytester, monkeypatch, plugin_args)
    report = pytester.path / "rep"
    report.mkdir()
    good = json.dumps({"key": "old", "machine": "testbox", "when": "2026-01-01", "ln_ratio": -0.69})
    (report / "history.jsonl").write_bytes(
        f"{good}\n[1, 2]\n".encode() + b'{"key": "old", "ln_ratio": NaN}\n' + good[:25].encode()
    )
    result = suite.run(f"--convperf-report={report}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*history.jsonl:2: a JSON list, not an object; line skipped*",
            "*history.jsonl:3: ln_ratio nan is not a finite number; line skipped*",
            "*history.jsonl:4: not JSON (JSONDecodeError*",
        ]
    )
    for name in ("report.md", "results.json", "rows.json", "night.json"):
        assert (report / name).stat().st_size > 0, name
    lines = (report / "history.jsonl").read_bytes().split(b"\n")
    tonight = [json.loads(line) for line in lines[4:] if line]
    assert [r["key"].split("[")[0] for r in tonight] == ["test_a", "test_b"]
