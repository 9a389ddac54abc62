"""The fresh-process confirm's pure parts: k processes' confirms as one, the noise the gate charges
for them, and which rows are speed FAILs to confirm again (the subprocess itself:
tests/integration/test_fresh_confirm.py)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from pytest_convperf.core.results import Verdict
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.judge.decision import stage_of
from pytest_convperf.judge.outcome import Decision
from pytest_convperf.night.fresh_confirm import across_processes, suspects
from tests.unit.judge.test_verdict import GPU, comparison, entry


def test_processes_average_their_median_log_ratios_and_keep_every_round() -> None:
    a, b = comparison(0.50, se=0.003, n=63), comparison(0.52, se=0.004, n=63)
    both = across_processes([a, b])
    assert both.time_ratio == pytest.approx(math.sqrt(0.50 * 0.52))
    assert both.se == pytest.approx(math.sqrt(0.003**2 + 0.004**2) / 2)
    assert both.n_rounds == 126 and len(both.log_ratios) == 126 and both.candidate.n == 126
    assert both.facts["processes"] == 2 and both.facts["process_ratios"] == [0.50, 0.52]
    assert across_processes([a]) is a


def test_the_processes_witness_is_their_geometric_mean_or_none() -> None:
    """The machine's witness (measure.witness) of k processes, pooled like their ratios; where one
    process has none, the pooled comparison has none (the judge reads the paired reference)."""
    a, b = comparison(0.50), comparison(0.52)
    a = a.with_facts({"witness_us": 100.0, "witness_looks_us": [99.0, 101.0]})
    both = across_processes([a, b.with_facts({"witness_us": 121.0})])
    assert both.facts["witness_us"] == pytest.approx(110.0) and "witness_looks_us" not in both.facts
    assert "witness_us" not in across_processes([a, b]).facts


def test_the_gate_charges_the_mean_of_k_processes_noise_over_k() -> None:
    stored = entry(0.5, noise=0.01, ref_runs=31)
    one = comparison(0.55, se=0.002, n=126)
    two = dataclasses.replace(one, facts={"processes": 2})
    s1, s2 = stage_of("confirm", one, stored, GPU, 0.9995), stage_of("confirm", two, stored, GPU, 0.9995)
    assert s1.sigma**2 == pytest.approx(0.002**2 + 0.01**2 * (1 + 1 / 31))
    assert s2.sigma**2 == pytest.approx(0.002**2 + 0.01**2 * (1 / 2 + 1 / 31))


def _row(verdict: str, stage: str | None, *, baseline: bool = True) -> CheckRow:
    return CheckRow(
        key=f"k-{verdict}-{stage}",
        nodeid="t.py::test",
        module="t",
        problem="p",
        phase="forward",
        comparison=comparison(0.6),
        errors=(),
        verdict=Verdict(verdict),
        message="",
        decision=Decision(Verdict(verdict), "pass", "", stage=stage),
        baseline=entry(0.5) if baseline else None,
    )


def test_only_speed_fails_with_a_baseline_are_confirmed_again() -> None:
    rows = [
        _row("FAIL", "confirm"),
        _row("FAIL", "screen"),
        _row("FAIL", "drift"),  # a correctness drift is not a speed question
        _row("PASS", "screen"),
        _row("FAIL", "confirm", baseline=False),
    ]
    assert [r.key for r in suspects(rows)] == ["k-FAIL-confirm", "k-FAIL-screen"]


def test_a_rerun_inherits_convperf_options_and_absolute_paths_but_no_outputs(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from pytest_convperf.core.rerun import forwarded_args

    given = {"convperf": True, "convperf_device": "cpu", "convperf_report": "r", "convperf_tolerance": "0.05"}
    config = SimpleNamespace(
        invocation_params=SimpleNamespace(
            args=("sub/t.py", "-c", "sub/pytest.ini", "-p", "myplugin", "--rootdir=.", "-k", "x"),
            dir=tmp_path,
        ),
        getoption=lambda name, default=None: given.get(name, default),
    )
    out = forwarded_args(config)  # type: ignore[arg-type]
    assert out[:6] == [
        "-c",
        str(tmp_path / "sub/pytest.ini"),
        "-p",
        "myplugin",
        f"--rootdir={tmp_path / '.'}",
        "--convperf",
    ]
    assert "--convperf-device=cpu" in out and "--convperf-tolerance=0.05" in out
    assert (
        not any(a.startswith("--convperf-report") for a in out) and "-k" not in out and "sub/t.py" not in out
    )


def test_a_grandchild_does_not_outlive_a_fresh_process_that_exits_normally(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys
    import time

    from pytest_convperf.night.fresh_confirm import _run

    pid_file = tmp_path / "grandchild.pid"
    # The "fresh process" starts a sleeper (its child, our grandchild) and exits 0 at once.
    spawn = (
        "import subprocess, sys; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))"
    )
    assert _run([sys.executable, "-c", spawn], tmp_path, 30, tmp_path / "log.txt") is None
    pid = int(pid_file.read_text())
    for _ in range(100):  # killed: gone (reaped by init) or a zombie
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
        if state.stdout.strip().startswith("Z"):
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    raise AssertionError("the grandchild of the fresh process still runs after it exited")
