"""``python -m pytest_convperf merge-baselines`` and ``report``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from pytest_convperf.baselines.store import dump_text
from pytest_convperf.judge.entry import Entry
from tests.integration._lifecycle import subprocess_env
from tests.rows import check_row


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess_env(monkeypatch)


def _file(path: Path, entries: dict[str, Entry], machine: str = "m1") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_text(machine, entries))
    return path


def _e(ratio: float) -> Entry:
    return Entry(time_ratio=ratio, noise=0.01, us_candidate=ratio * 10, us_reference=10.0)


def test_merge_baselines_unions_keys_and_refuses_conflicts(pytester: pytest.Pytester) -> None:
    a = _file(pytester.path / "a" / "m1" / "t.yaml", {"x": _e(0.5), "y": _e(0.6)})
    b = _file(pytester.path / "b" / "m1" / "t.yaml", {"y": _e(0.6), "z": _e(0.7)})
    out = pytester.path / "out.yaml"
    result = pytester.run(
        sys.executable, "-m", "pytest_convperf", "merge-baselines", str(a), str(b), "-o", str(out)
    )
    assert result.ret == 0, result.stderr.str()
    assert set(yaml.safe_load(out.read_text())["benchmarks"]) == {"x", "y", "z"}

    c = _file(pytester.path / "c" / "m1" / "t.yaml", {"y": _e(0.9)})
    result = pytester.run(
        sys.executable, "-m", "pytest_convperf", "merge-baselines", str(a), str(c), "-o", str(out)
    )
    assert result.ret == 1 and "conflicting values for: y" in result.stderr.str()
    for prefer, ratio in (("first", 0.6), ("last", 0.9)):
        result = pytester.run(
            sys.executable,
            "-m",
            "pytest_convperf",
            "merge-baselines",
            str(a),
            str(c),
            "-o",
            str(out),
            "--prefer",
            prefer,
        )
        assert result.ret == 0
        assert yaml.safe_load(out.read_text())["benchmarks"]["y"]["time_ratio"] == ratio

    other = _file(pytester.path / "d" / "m2" / "t.yaml", {"q": _e(0.5)}, machine="m2")
    result = pytester.run(
        sys.executable, "-m", "pytest_convperf", "merge-baselines", str(a), str(other), "-o", str(out)
    )
    assert result.ret == 4 and "one machine class only" in result.stderr.str()
    broken = pytester.path / "e" / "m1" / "t.yaml"
    broken.parent.mkdir(parents=True)
    broken.write_text("schema: [")
    result = pytester.run(
        sys.executable, "-m", "pytest_convperf", "merge-baselines", str(a), str(broken), "-o", str(out)
    )
    assert result.ret == 4 and "not valid YAML" in result.stderr.str()


def test_report_command_reprints_a_report_dir(pytester: pytest.Pytester) -> None:
    rows = [
        {
            "key": "k[p]",
            "module": "m",
            "verdict": "PASS",
            "message": "PASS: ok",
            "comparison": {
                "time_ratio": 0.5,
                "time_ratio_ci": [0.49, 0.51],
                "candidate": {"median": 5e-4},
                "reference": {"median": 1e-3},
            },
        }
    ]
    (pytester.path / "rep").mkdir()
    # rows.json holds whole rows (CheckRow.to_dict), which `report` reads back with CheckRow.from_dict.
    (pytester.path / "rep" / "rows.json").write_text(json.dumps([check_row(row).to_dict() for row in rows]))
    result = pytester.run(sys.executable, "-m", "pytest_convperf", "report", "rep")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["PASS (1)", "*m::k?p?  speedup 2.000x*"])
    result = pytester.run(sys.executable, "-m", "pytest_convperf", "report", "rep", "--markdown")
    result.stdout.fnmatch_lines(["## convperf report", "*| ` m::k?p? ` | 2.000x*"])
    result = pytester.run(sys.executable, "-m", "pytest_convperf", "report", "nowhere")
    assert result.ret == 2 and "no rows in nowhere (rows.json" in result.stderr.str()
