"""Pinned performance cliffs end to end (issue 18 item 3): find and shrink, pin, re-check, retire.

The inner suite's candidate is correct (``F.conv2d``); the fake timer plants the cliff: from
``CLIFF_SLOW_FROM`` channels on, the candidate's time is 4 x the reference's (speedup 0.25, under
the floor 0.5), so the numbers are exact whatever the load on the box.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.integration._lifecycle import MACHINE, subprocess_env

INNER = """
import os

import pytest
import torch.nn.functional as F
from hypothesis import strategies as st

from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.measure.fake import FakeTimer

SEEN = {"c": 1}


def candidate(x, w, b, *args):
    SEEN["c"] = x.shape[1]  # the fake clock reads it right after this call
    return F.conv2d(x, w, b, *args)


def duration(name, index):
    slow_from = int(os.environ.get("CLIFF_SLOW_FROM", "0"))  # 0: the candidate is fixed
    factor = float(os.environ.get("CLIFF_FACTOR", "4"))
    slow = name == "candidate" and slow_from and SEEN["c"] >= slow_from
    return factor * 1e-3 if slow else 1e-3


@pytest.fixture
def convperf_timer():
    return FakeTimer(duration)


MAX_C = int(os.environ.get("CLIFF_MAX_C", "16"))
PROBLEMS = st.integers(1, MAX_C).map(
    lambda c: Conv2dProblem(n=1, c_in=c, h=8, w=8, c_out=c, kernel=3, padding=1, groups=c)
)


def test_search(convperf_cliffs):
    result = convperf_cliffs.search("toy", candidate, PROBLEMS, max_examples=40)
    print("SEARCH:", result.line())
    convperf_cliffs.enforce(result)
"""

CLIFF = "n1-ci5-h8-w8-co5-k3x3-s1-p1-d1-g5-fp32-nchw"  # the simplest shape under the floor
KEY = f"test_search@{CLIFF}"


def _args(plugin_args: tuple[str, ...], *args: str) -> tuple[str, ...]:
    return (
        *plugin_args,
        "--convperf",
        f"--convperf-machine={MACHINE}",
        "--convperf-device=cpu",
        "--convperf-noise-floor=0.02",
        "--convperf-false-alarms=none",
        "-p",
        "no:cacheprovider",
        "-s",
        *args,
    )


def _setup(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\nconvperf_speedup_floor = toy = 0.5\n")
    pytester.makepyfile(test_inner=INNER)
    monkeypatch.setenv("CLIFF_SLOW_FROM", "5")


def _entries(pytester: pytest.Pytester) -> dict[str, Any]:
    path = pytester.path / "baselines" / MACHINE / "test_inner.yaml"
    return dict(yaml.safe_load(path.read_text())["benchmarks"]) if path.exists() else {}


def _review(pytester: pytest.Pytester) -> str:
    return (pytester.path / "convperf-update.md").read_text()


def test_a_cliff_is_shrunk_pinned_rechecked_and_retired(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    _setup(pytester, monkeypatch)

    def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
        return pytester.runpytest(*_args(plugin_args, *args))

    # (1) Found and shrunk: the failure names the simplest shape under the floor, with a repro line.
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"*performance cliff: toy's speedup 0.250x on {CLIFF} (shrunk) is under its declared floor 0.5x*",
         f'*repro: convperf.check(candidate, Conv2dProblem.from_id("{CLIFF}"))*']
    )  # fmt: skip
    assert _entries(pytester) == {}

    # An update that does not select cliffs pins nothing and says so in the review file.
    _run(pytester, "--convperf-update-baselines").assert_outcomes(failed=1)
    assert _entries(pytester) == {}
    assert f"| unpinned | ` {KEY} (" in _review(pytester)

    # (2) Pinned by the explicit kind, listed for review with its shape, speedup, floor and reason.
    _run(pytester, "--convperf-update-baselines=cliffs", "--convperf-reason=known k3 cliff").assert_outcomes(
        passed=1
    )
    entry = _entries(pytester)[KEY]
    assert entry["cliff"] == {"family": "toy", "problem": CLIFF, "floor": 0.5, "speedup": 0.25}
    assert entry["time_ratio"] == pytest.approx(4.0)
    review = _review(pytester)
    assert (
        f"| pin | ` {KEY} ({MACHINE}/test_inner.yaml) ` | ` toy ` | ` {CLIFF} ` | 0.250x | 0.5x | ` new cliff"
        in review
    )
    assert "reason: known k3 cliff" in review

    # (3) Re-checked from the baseline on the next run, against its stored ratio (no new cliffs in
    # this search space): it passes as it is, and a further slowdown of it FAILs like any entry.
    monkeypatch.setenv("CLIFF_MAX_C", "4")
    result = _run(pytester, "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*PASS*{KEY}*speedup 0.250x*"])
    monkeypatch.setenv("CLIFF_FACTOR", "8")
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*pinned cliff {KEY}*FAIL*"])
    monkeypatch.setenv("CLIFF_FACTOR", "4")

    # (4) The candidate is fixed: an update without cliffs keeps the entry and says why; the
    # cliffs update retires it, and the review file says so.
    monkeypatch.setenv("CLIFF_SLOW_FROM", "0")
    _run(pytester, "--convperf-update-baselines").assert_outcomes(passed=1)
    assert KEY in _entries(pytester)
    assert f"| keep | ` {KEY} (" in _review(pytester) and "retire it with" in _review(pytester)
    _run(pytester, "--convperf-update-baselines=cliffs").assert_outcomes(passed=1)
    assert KEY not in _entries(pytester)
    assert f"| retire | ` {KEY} (" in _review(pytester) and "fixed: 1.000x" in _review(pytester)


def test_pins_and_retirements_travel_from_xdist_workers(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    pytest.importorskip("xdist")
    _setup(pytester, monkeypatch)
    subprocess_env(monkeypatch)
    pin = pytester.runpytest_subprocess(*_args(plugin_args, "-n", "1", "--convperf-update-baselines=cliffs"))
    pin.assert_outcomes(passed=1)
    assert _entries(pytester)[KEY]["cliff"]["speedup"] == 0.25  # the worker's pin, written by the controller
    monkeypatch.setenv("CLIFF_SLOW_FROM", "0")
    retire = pytester.runpytest_subprocess(
        *_args(plugin_args, "-n", "1", "--convperf-update-baselines=cliffs")
    )
    retire.assert_outcomes(passed=1)
    assert KEY not in _entries(pytester) and f"| retire | ` {KEY} (" in _review(pytester)
