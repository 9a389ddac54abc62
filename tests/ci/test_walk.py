"""The walk of one check's candidate from ``ConvperfFixture.check`` to its timed rounds is short
(issue 39 item 1): at most 5 calls of the plugin's code.

One check runs in an inner session with a fake timer whose durations function records the Python
stack the first time a timed round (not a warm-up round: ``run_rounds`` is on the stack) calls it.
The walk is the plugin's frames below ``ConvperfFixture.check`` down to ``measure.run.run``, the one
call that runs a measurement's rounds on its timer; what lies under it (``run_rounds``,
``run_round``, the timer) is the measure layer's own.
"""

from __future__ import annotations

import json

import pytest

# Imported here, not first inside the inner session (see tests/integration/test_fixtures.py).
import torch  # noqa: F401

from pytest_convperf.measure import fake, rounds  # noqa: F401

MAX_WALK = 5

CONFTEST = """
import inspect, json
from pathlib import Path

import pytest
from pytest_convperf.measure.fake import FakeTimer

PACKAGE = "pytest_convperf"
seen = []


def _frames():
    out = []
    for info in inspect.stack()[1:]:
        module = info.frame.f_globals.get("__name__", "")
        out.append([module, info.frame.f_code.co_qualname])
    return out


def times(name, index):
    if not seen:
        frames = _frames()
        if any(f == ["pytest_convperf.measure.run", "run_rounds"] for f in frames):
            seen.append(frames)
            Path("stack.json").write_text(json.dumps(frames))
    return 5e-4 if name == "candidate" else 1e-3


@pytest.fixture
def convperf_timer():
    return FakeTimer(times)
"""

TEST = """
import torch.nn.functional as F
from pytest_convperf.core.problem import Conv2dProblem


def test_one_check(convperf):
    convperf.check(F.conv2d, Conv2dProblem(n=1, c_in=4, h=10, w=10, c_out=4, padding=(1, 1)))
"""


def walk(frames: list[list[str]]) -> list[str]:
    """The plugin's calls from ``ConvperfFixture.check`` (exclusive) down to ``measure.run.run``
    (inclusive), outermost first; ``frames`` is innermost first, as ``inspect.stack`` gives it."""
    outer_first = frames[::-1]
    names = [f"{module}.{qualname}" for module, qualname in outer_first]
    start = names.index("pytest_convperf.check.fixture.ConvperfFixture.check")
    end = names.index("pytest_convperf.measure.run.run")
    assert start < end, names
    return [n for n in names[start + 1 : end + 1] if n.startswith("pytest_convperf.")]


def test_walk_of_one_check_to_its_timed_rounds_is_at_most_five_calls(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...]
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_walk_inner=TEST)
    pytester.runpytest(*cpu_plugin_args, "--convperf").assert_outcomes(passed=1)
    frames = json.loads((pytester.path / "stack.json").read_text())
    calls = walk(frames)
    assert calls[-1] == "pytest_convperf.measure.run.run"
    assert len(calls) <= MAX_WALK, f"{len(calls)} calls from ConvperfFixture.check: {' -> '.join(calls)}"


def test_walk_counts_every_plugin_frame_between_check_and_run() -> None:
    """The counting itself: frames outside the plugin are left out, a wrapper in between counts."""
    frames = [
        ["pytest_convperf.measure.fake", "FakeTimer.run_round"],
        ["pytest_convperf.measure.run", "run_rounds"],
        ["pytest_convperf.measure.run", "run"],
        ["pytest_convperf.measure.rounds", "measure_pair"],
        ["contextlib", "inner"],
        ["pytest_convperf.check.wrapper", "wrap"],
        ["pytest_convperf.check.pipeline", "run_check"],
        ["pytest_convperf.check.fixture", "ConvperfFixture.check"],
        ["test_inner", "test_one_check"],
    ]
    assert walk(frames) == [
        "pytest_convperf.check.pipeline.run_check",
        "pytest_convperf.check.wrapper.wrap",
        "pytest_convperf.measure.rounds.measure_pair",
        "pytest_convperf.measure.run.run",
    ]
