"""Control flow of the CUDA timer, on any machine: CUDA calls are replaced by a recorder.

Nothing here measures a GPU. It pins down what the GPU tests cannot show on a CPU-only runner:
the order of work queued for one sample (flush, gate, start event, call, end event), a single
synchronization per round after the last end event, per-call division for graph jobs, and the
gate that follows the host's enqueue time both up and back down.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_convperf.core.clocks import ClockSample
from pytest_convperf.measure import cuda as cuda_timing
from pytest_convperf.measure.protocol import Job
from tests.unit.measure._cuda_stub import Recorder, stub_timer

ELAPSED_MS = 0.25


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch) -> tuple[cuda_timing.CudaTimer, Recorder]:
    rec = Recorder(ELAPSED_MS)
    timer = stub_timer(monkeypatch, rec)
    timer._evict = lambda: rec.log.append("flush")
    timer._cycles_per_s = 1e9  # 1 cycle per ns
    return timer, rec


def test_one_sample_is_flush_gate_start_call_end_and_one_sync_per_round(
    rig: tuple[cuda_timing.CudaTimer, Recorder],
) -> None:
    timer, rec = rig
    jobs = [
        Job("candidate", lambda: rec.log.append("candidate")),
        Job("reference", lambda: rec.log.append("reference")),
    ]
    times = timer.run_round(jobs)
    gate = "sleep:20000"  # 20 us at 1e9 cycles/s
    assert rec.log == [
        "flush", gate, "record", "candidate", "record",
        "flush", gate, "record", "reference", "record",
        "sync",
    ]  # fmt: skip
    assert times == [ELAPSED_MS * 1e-3, ELAPSED_MS * 1e-3]
    assert timer.clocks() == ClockSample(sm_mhz=1500.0)


def test_warm_jobs_skip_the_flush_and_graph_jobs_divide_by_their_calls(
    rig: tuple[cuda_timing.CudaTimer, Recorder],
) -> None:
    timer, rec = rig
    warm = timer.job("w", lambda: None, "warm")
    assert (warm.flush, warm.mode, warm.l2) == (False, "warm", "warm")
    graph = Job("g", lambda: None, calls_per_sample=50, flush=False, mode="graph", l2="rotated")
    (t,) = timer.run_round([graph])
    assert "flush" not in rec.log
    assert t == pytest.approx(ELAPSED_MS * 1e-3 / 50)


def test_gate_follows_the_enqueue_time_up_and_back_down(
    rig: tuple[cuda_timing.CudaTimer, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    timer, _ = rig
    # A scripted host clock: only the calls advance it, so enqueue times are exact.
    clock = SimpleNamespace(t=0.0)
    monkeypatch.setattr(cuda_timing, "time", SimpleNamespace(perf_counter=lambda: clock.t))

    def host_heavy() -> None:  # 2 ms to enqueue
        clock.t += 0.002

    slow = Job("slow", host_heavy)
    fast = Job("fast", lambda: None)
    timer.run_round([slow])
    assert timer.facts()["gate_us"] == pytest.approx(4000.0)  # 2 x the slowest recent enqueue
    assert timer.host_bound == 1
    for _ in range(16):
        timer.run_round([fast])
    assert timer.facts()["gate_us"] == pytest.approx(cuda_timing.MIN_GATE_S * 1e6)  # back to the floor
    assert timer.facts()["max_enqueue_us"] == pytest.approx(2000.0)
