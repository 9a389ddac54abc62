"""CUDA paths of the measurement engine. They skip without a GPU and run on one (nightly GPU job).

Covered: cold/warm/graph CUDA-event timing, the paired ratio of a doubled conv, the flush and the
gate facts, NVML clock sampling, the CUDA allocator memory tracker, CUDA kernel tables, the
roofline sanity error, and a lost CUDA context stopping later tests with one message.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from pytest_convperf.core.clocks import ClockSample
from pytest_convperf.core.device import resolve_device
from pytest_convperf.core.problem import Conv2dProblem, ConvInputs
from pytest_convperf.measure.cuda import CudaTimer
from pytest_convperf.measure.memory import memory_tracker
from pytest_convperf.measure.profiling import profile_kernels
from pytest_convperf.measure.rounds import measure_one, measure_pair
from pytest_convperf.measure.rule import StopRule, Workload

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PROBLEM = Conv2dProblem(n=8, c_in=64, h=56, w=56, c_out=64, padding=(1, 1))
TINY = Conv2dProblem(n=1, c_in=8, h=8, w=8, c_out=8, padding=(1, 1))


def _calls(problem: Conv2dProblem) -> tuple[Callable[[], object], Callable[[], object]]:
    x, w, b = problem.make_inputs(0, "cuda")
    stride, padding, dilation, groups = problem.conv_args()

    def once() -> object:
        return F.conv2d(x, w, b, stride, padding, dilation, groups)

    def twice() -> object:
        once()
        return once()

    return once, twice


@pytest.fixture(scope="module")
def timer() -> CudaTimer:
    return CudaTimer(resolve_device("cuda"))


def test_cuda_fingerprint_names_the_gpu() -> None:
    info = resolve_device("cuda")
    assert info.is_cuda and info.torch_device.startswith("cuda:")
    assert info.slug.startswith("nvidia-") and "gb" in info.slug
    assert info.l2_bytes > 0 and info.facts["sm_count"] > 0
    assert info.facts["cudnn"] is not None
    assert info.copy_bandwidth() > 100e9  # any datacenter GPU copies > 100 GB/s
    sample = info.sample_clocks()
    if info.nvml is None:
        assert str(info.facts["clocks"]).startswith("clocks unknown")
    else:
        assert isinstance(sample, ClockSample) and sample.sm_mhz and sample.sm_mhz > 100


@pytest.mark.parametrize("mode", ["cold", "warm"])
def test_cold_and_warm_modes(timer: CudaTimer, mode: str) -> None:
    once, _ = _calls(PROBLEM)
    m = measure_one(timer, once, mode=mode)
    assert m.mode == mode and m.l2 == ("flushed" if mode == "cold" else "warm")
    assert m.n >= 21 and m.ci[0] <= m.median <= m.ci[1]
    facts = timer.facts()
    assert facts["gate_us"] >= 20.0
    if mode == "cold":
        assert facts["flush_us"] is not None and facts["flush_us"] > 0


def test_graph_mode_for_a_tiny_kernel(timer: CudaTimer) -> None:
    once, _ = _calls(TINY)
    cold = measure_one(timer, once, mode="cold")
    graph = measure_one(timer, once, mode="graph")
    assert graph.mode == "graph"
    assert graph.l2 == "warm"  # no rotation for a plain callable
    # Graph replay removes launch gaps; per-call time cannot exceed the gated cold time by much.
    assert graph.median < 1.5 * cold.median


def test_doubled_conv_reads_about_twice_the_reference(timer: CudaTimer) -> None:
    once, twice = _calls(PROBLEM)
    cmp = measure_pair(timer, twice, once)
    assert 1.6 < cmp.time_ratio < 2.5, cmp.facts
    same = measure_pair(timer, once, once)
    assert 0.95 < same.time_ratio < 1.05, same.facts
    assert same.facts["clocks"] == "clocks unknown" or same.facts["clocks"]["sm_mhz_median"] > 0


def test_auto_mode_rotates_inputs_under_graphs_for_short_kernels(timer: CudaTimer) -> None:
    sets = [TINY.make_inputs(seed, "cuda") for seed in range(64)]
    stride, padding, dilation, groups = TINY.conv_args()

    def bind(s: ConvInputs) -> Callable[[], object]:
        return lambda: F.conv2d(s.input, s.weight, s.bias, stride, padding, dilation, groups)

    def calls(k: int) -> list[Callable[[], object]]:
        return [bind(s) for s in sets[: min(k, len(sets))]]

    work = Workload("candidate", calls(1)[0], calls, TINY.min_bytes)
    ref = Workload("reference", calls(1)[0], calls, TINY.min_bytes)
    cmp = measure_pair(timer, work, ref, mode="auto", rule=StopRule(graph_threshold_s=1.0))
    assert cmp.candidate.mode == "graph", cmp.facts.get("graph")
    assert cmp.facts["graph"]["calls_per_replay"] >= 10


def test_cuda_memory_tracker_sees_the_allocator_peak() -> None:
    info = resolve_device("cuda")
    with memory_tracker(info) as mem:
        block = torch.empty(64 * 2**20, dtype=torch.float32, device="cuda")  # 256 MiB
        del block
    assert mem.source == "cuda-allocator"
    assert mem.peak_bytes >= 256 * 2**20
    assert info.nvml is None or (mem.nvml_used_bytes or 0) > 0


def test_cuda_kernel_table_names_the_conv_kernel() -> None:
    once, _ = _calls(PROBLEM)
    rows = profile_kernels(once, resolve_device("cuda"))
    assert rows and rows[0].total_us > 0
    assert abs(sum(r.share for r in rows) - 1.0) < 1e-6


def test_kernel_that_does_no_work_is_caught(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    pytester.makepyfile(
        """
        import torch
        from pytest_convperf.core.problem import Conv2dProblem, ConvInputs

        P = Conv2dProblem(n=32, c_in=64, h=112, w=112, c_out=64, padding=(1, 1))
        OUT = torch.empty(P.output_shape, device="cuda")

        def lazy(*args):
            return OUT  # never launches a kernel

        def test_m(convperf):
            convperf.measure(lazy, P)
        """
    )
    result = pytester.runpytest_subprocess(*plugin_args, "--convperf", "--convperf-device=cuda")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*did not do its work*"])


def test_lost_cuda_context_fails_once_then_skips_with_one_reason(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...]
) -> None:
    pytester.makepyfile(
        """
        import torch
        import torch.nn.functional as F
        from pytest_convperf.core.problem import Conv2dProblem, ConvInputs

        P = Conv2dProblem(n=1, c_in=4, h=16, w=16, c_out=4, padding=(1, 1))
        calls = {"n": 0}

        def faulting(x, w, b, *args):
            calls["n"] += 1
            if calls["n"] > 5:  # after warm-up starts: an out-of-bounds gather trips a device assert
                idx = torch.full((1,), 10**9, device=x.device, dtype=torch.long)
                return x.flatten()[idx]
            return F.conv2d(x, w, b, *args)

        def test_a_faults(convperf):
            convperf.measure(faulting, P)

        def test_b_after(convperf):
            convperf.measure(F.conv2d, P)

        def test_c_after(convperf):
            convperf.measure(F.conv2d, P)
        """
    )
    result = pytester.runpytest_subprocess(*plugin_args, "--convperf", "--convperf-device=cuda", "-rs")
    result.assert_outcomes(failed=1, skipped=2)
    result.stdout.fnmatch_lines(["*CUDA context lost*", "*SKIPPED [[]2[]]*the CUDA context was lost in*"])
