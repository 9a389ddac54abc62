"""Self-benchmark of the timing harness against the anchors (issue 3, item 6).

On one conv (the reference ``F.conv2d`` of a depthwise seed shape; scaled down on a CPU) it takes
five fresh measurements of the median with each method and reports the run-to-run spread of
those medians and the wall time each measurement cost:

- ``convperf``: this plugin's timer (``measure.rounds.measure_one``: warm-up, adaptive rounds on
  the CI of the median; cold L2 and a gate on a GPU);
- ``convperf paired``: the ratio of the same conv against itself in paired rounds (the quantity
  baselines store), whose spread is the noise a regression check sees;
- ``torch.utils.benchmark`` ``Timer.blocked_autorange()`` (default ``min_run_time=0.2``);
- ``pytest-benchmark`` with its default calibration (a ``BenchmarkFixture`` built from the
  session's pytest-benchmark options, as its ``benchmark`` fixture does);
- ``triton.testing.do_bench`` (median) when triton is importable and a GPU is in use.

Every method times under the same pinned thread count. The table is printed and written to the
report directory as ``harness.md`` and ``harness.json``. Goal: lower spread than each anchor at
no more wall time; the test asserts only that all methods measure the same conv (medians within
a factor 3 of each other), since spreads on a shared machine are what they are.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils import benchmark as torch_benchmark

from pytest_convperf import Conv2dProblem, DeviceInfo, ReportSections, Timer
from pytest_convperf.core import stats
from pytest_convperf.measure.rounds import measure_one, measure_pair

REPEATS = 5
GPU_PROBLEM = Conv2dProblem(n=16, c_in=32, h=112, w=112, c_out=32, padding=(1, 1), groups=32)
CPU_PROBLEM = Conv2dProblem(n=2, c_in=32, h=56, w=56, c_out=32, padding=(1, 1), groups=32)


@dataclass
class Row:
    """One method: its five medians (seconds), their spread and the wall time per measurement."""

    method: str
    medians: list[float]
    wall_s: list[float]
    note: str = ""

    @property
    def median_us(self) -> float:
        return stats.median(self.medians) * 1e6

    @property
    def spread(self) -> float:
        return stats.relative_spread(self.medians)

    @property
    def cv(self) -> float:
        return stats.coefficient_of_variation(self.medians)

    @property
    def wall(self) -> float:
        return sum(self.wall_s) / len(self.wall_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "median_us": self.median_us,
            "spread": self.spread,
            "cv": self.cv,
            "wall": self.wall,
        }


def _interleaved(methods: list[tuple[str, Callable[[], float], str]]) -> list[Row]:
    """``REPEATS`` rounds; each round runs every method once, in turn, so all of them see the
    same machine load over time (a shared machine's load drifts more than any method's noise)."""
    rows = [Row(name, [], [], note) for name, _, note in methods]
    for _ in range(REPEATS):
        for row, (_, measure, _) in zip(rows, methods):
            start = time.perf_counter()
            row.medians.append(measure())
            row.wall_s.append(time.perf_counter() - start)
    return rows


def _pytest_benchmark(request: pytest.FixtureRequest, fn: Callable[[], object]) -> Callable[[], float] | None:
    """A fresh pytest-benchmark ``BenchmarkFixture`` per measurement, with the session's defaults."""
    session = getattr(request.config, "_benchmarksession", None)
    if session is None:
        return None
    from pytest_benchmark.fixture import BenchmarkFixture

    def measure() -> float:
        collected: list[Any] = []
        fixture = BenchmarkFixture(  # type: ignore[no-untyped-call]
            request.node,
            add_stats=collected.append,  # keep these runs out of pytest-benchmark's own report
            logger=session.logger,
            warner=request.node.warn,
            **{**session.options, "disabled": False},
        )
        fixture(fn)
        return float(collected[0].stats.median)

    return measure


def _table(rows: list[Row], header: str) -> str:
    lines = [
        header,
        "",
        "| method | median us | spread of 5 medians | CV | wall s / measurement | note |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.method} | {r.median_us:.2f} | {r.spread:.2%} | {r.cv:.2%} | {r.wall:.2f} | {r.note} |"
        )
    return "\n".join(lines)


@pytest.mark.convperf
def test_harness_against_anchors(
    request: pytest.FixtureRequest,
    convperf_report: ReportSections,
    convperf_device: DeviceInfo,
    convperf_timer: Timer,
) -> None:
    """Spread and cost of five fresh median measurements per method, on one conv."""
    if convperf_timer.kind == "fake":
        pytest.skip("the self-benchmark measures real timers; a fake timer is configured")
    problem = GPU_PROBLEM if convperf_device.is_cuda else CPU_PROBLEM
    x, w, b = problem.make_inputs(0, convperf_device.torch_device)
    stride, padding, dilation, groups = problem.conv_args()

    def conv() -> object:
        return F.conv2d(x, w, b, stride, padding, dilation, groups)

    def conv_synced() -> object:
        out = conv()
        if convperf_device.is_cuda:
            torch.cuda.synchronize()
        return out

    timer = convperf_timer
    mode = "auto" if convperf_device.is_cuda else "cold"
    with timer.pinned():
        threads = torch.get_num_threads()

    def ours() -> float:
        return measure_one(timer, conv, mode=mode).median

    def torch_timer() -> float:
        with timer.pinned():
            return float(
                torch_benchmark.Timer(stmt="fn()", globals={"fn": conv}, num_threads=threads)
                .blocked_autorange()
                .median
            )

    def paired_ratio() -> float:
        return measure_pair(timer, conv, conv, mode=mode).time_ratio

    methods: list[tuple[str, Callable[[], float], str]] = [
        ("convperf (median)", ours, "adaptive; CI of median"),
        ("torch.utils.benchmark blocked_autorange", torch_timer, "median of block means; 0.2 s"),
    ]
    pb = _pytest_benchmark(request, conv_synced)
    if pb is not None:

        def pytest_benchmark() -> float:
            with timer.pinned():
                return pb()

        methods.append(("pytest-benchmark default calibration", pytest_benchmark, "sync in call on GPU"))
    if convperf_device.is_cuda:
        try:
            from triton.testing import do_bench
        except ImportError:
            do_bench = None
        if do_bench is not None:
            bench = do_bench

            def triton_median() -> float:
                return float(bench(conv, return_mode="median")) * 1e-3

            methods.append(("triton.testing.do_bench", triton_median, "median mode; 256 MB flush"))
    methods.append(("convperf paired ratio (conv vs itself)", paired_ratio, "values are ratios, not us"))
    *rows, paired = _interleaved(methods)
    ratios = paired.medians

    header = (
        f"Timing harness self-benchmark on {convperf_device.slug} ({convperf_device.torch_device}, "
        f"{threads} thread(s)): F.conv2d {problem.id}, {REPEATS} fresh measurements per method"
    )
    table = _table(rows, header)
    table += (
        f"\n| {paired.method} | {stats.median(ratios):.4f} (ratio) | {paired.spread:.2%} | {paired.cv:.2%} "
        f"| {paired.wall:.2f} | {paired.note} |"
    )
    extra: dict[str, Any] = {}
    if convperf_device.is_cuda:
        facts = timer.facts()
        clocks = convperf_device.sample_clocks()
        extra = {
            "timer": facts,
            "clocks_now": clocks.to_dict() if clocks else convperf_device.facts.get("clocks"),
        }
        table += (
            f"\n\nflush {facts.get('flush_bytes', 0) / 2**20:.0f} MiB costs "
            f"{facts.get('flush_us') or 0:.1f} us; "
            f"gate {facts.get('gate_us', 0):.1f} us (max enqueue {facts.get('max_enqueue_us', 0):.1f} us, "
            f"host-bound rounds {facts.get('host_bound_rounds')}); clocks now: {extra['clocks_now']}"
        )
    print("\n" + table)
    convperf_report.section("harness.md", table)
    convperf_report.section(
        "harness.json",
        json.dumps(
            {
                "problem": problem.id,
                "device": convperf_device.slug,
                "rows": [r.to_dict() for r in rows],
                "paired": paired.to_dict(),
                **extra,
            },
            indent=2,
            default=str,
        ),
    )
    # Same conv, same order of magnitude. Block-mean methods (torch's blocked_autorange) include
    # every preemption of a loaded machine while per-call medians skip them, so compare against
    # the middle of the anchors rather than demand that all agree.
    ours_us = rows[0].median_us
    anchors_us = stats.median([r.median_us for r in rows[1:]])
    assert anchors_us / 3 < ours_us < 3 * anchors_us, f"convperf {ours_us} us vs anchors {anchors_us} us"
    assert 0.8 < stats.median(ratios) < 1.25, f"the conv against itself should read ~1: {ratios}"
