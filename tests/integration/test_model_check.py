"""The public paired check (``pytest_convperf.check_pair``) times under the exclusive timing slot:
two model benchmarks on two xdist workers sharing the CPU never time at the same moment."""

from __future__ import annotations

import importlib.util
import json
import os
import time

import pytest

pytest.importorskip("fcntl", reason="the device lock uses POSIX flock")
xdist_only = pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="needs pytest-xdist")

# Both tests wait for each other before timing, so without serialisation their timed calls would
# run at the same time; each records every timed call's [start, end].
TWO_MODELS = """
import json, os, time
import pytest
from pytest_convperf import FakeTimer, check_pair

HERE = os.path.dirname(__file__)

@pytest.fixture
def convperf_timer():
    return FakeTimer({"candidate": 5e-4, "reference": 1e-3})

def rendezvous(i):
    open(os.path.join(HERE, f"ready-{i}"), "w").close()
    deadline = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(HERE, f"ready-{j}")) for j in range(2)):
        assert time.monotonic() < deadline, "the other test never arrived (not on two workers?)"
        time.sleep(0.005)

@pytest.mark.parametrize("i", range(2))
def test_model(convperf, i):
    calls = []

    def timed():
        t0 = time.monotonic()
        time.sleep(0.004)
        calls.append((t0, time.monotonic()))

    rendezvous(i)
    arrived = time.monotonic()
    check_pair(convperf, name=f"model-{i}", phase="forward", candidate=timed, reference=timed,
               rule={"min_rounds": 20})
    with open(os.path.join(HERE, f"calls-{i}.json"), "w") as fh:
        json.dump({"worker": os.environ["PYTEST_XDIST_WORKER"], "calls": calls,
                   "window": [arrived, time.monotonic()]}, fh)
"""


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@xdist_only
def test_two_model_benchmarks_on_two_workers_never_time_together(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pytester.makepyfile(test_two_models=TWO_MODELS)
    result = pytester.runpytest(
        *plugin_args,
        "-n",
        "2",
        "--convperf",
        "--convperf-device=cpu",
        f"--convperf-baselines={pytester.path / 'b'}",
        f"--testrunuid=convperf-pair-{os.getpid()}-{time.monotonic_ns()}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=2)
    a, b = (json.loads((pytester.path / f"calls-{i}.json").read_text()) for i in range(2))
    assert {a["worker"], b["worker"]} == {"gw0", "gw1"}, "the two tests must run on two workers"
    assert len(a["calls"]) > 40 and len(b["calls"]) > 40  # warm-up and >= 20 rounds of 2 calls
    # The two tests ran at the same time (the control: only the timing slot keeps them apart) ...
    assert _overlap(a["window"], b["window"])
    # ... and no timed call of one overlapped a timed call of the other.
    clashes = [(x, y) for x in a["calls"] for y in b["calls"] if _overlap(x, y)]
    assert not clashes, (
        f"{len(clashes)} timed calls of the two model benchmarks overlapped, e.g. {clashes[0]}"
    )
