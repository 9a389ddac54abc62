"""CUDA timer: events on the current stream, L2 flush, device-side gate, CUDA graphs.

One sample (mode ``cold``) is queued as: the L2 flush (read or write a buffer of 2 x L2, which
evicts the inputs from L2), ``torch.cuda._sleep`` (the gate), start event, the call, end event.
The gate keeps the GPU busy while the host enqueues the call, so host launch cost never enters
the events; it is sized from the measured enqueue time (at least 20 us) and grows if a call's
enqueue outlasts it. ``_sleep`` counts GPU clock cycles, so its cycles-per-second rate is measured
again after each warm-up (:meth:`CudaTimer.warmed_up`): a rate measured at idle clocks would make
the gate several times too short once the clocks ramp up. A round queues all its samples and
synchronizes once, after the last end event: there is never a synchronization inside a timed
region. The flush buffer is allocated once per timer.

Flush kinds (``CudaTimer(flush=...)``, else ``$CONVPERF_L2_FLUSH``, default ``read``):
``write`` zeroes the buffer (triton's ``do_bench``, nvbench's memset) and leaves up to one L2 of
dirty lines, which the timed kernel's own misses then write back to HBM (about 50 MB on an H100,
~15 us at 3.35 TB/s charged to the kernel under test); ``read`` sums the buffer into one 4-byte
scalar, so every line of 2 x L2 is touched and the lines left in L2 are clean: evicting them costs
the timed kernel nothing. The kind is in :meth:`CudaTimer.facts` (``flush``), so every row says
which flush produced it.

Mode ``graph`` captures K calls into a CUDA graph and times a replay (per-call time = replay /
K); it removes launch overhead for kernels under ~20 us. Rotated inputs keep L2 cold.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from pytest_convperf.core.environment import FLUSH_ENV, env_value, parse_flush
from pytest_convperf.measure.protocol import Job, Unwatched

if TYPE_CHECKING:
    from pytest_convperf.core.clocks import ClockSample
    from pytest_convperf.core.device import DeviceInfo

# torch.cuda's stubs leave these untyped; one Any alias keeps the calls checked elsewhere.
_CUDA: Any = torch.cuda
MIN_GATE_S = 20e-6
MAX_GATE_S = 5e-3


def flush_kind(value: str | None = None) -> str:
    """The L2 flush to use: ``value`` if given (the plugin passes ``ConvperfConfig.l2_flush``), else
    ``$CONVPERF_L2_FLUSH``, else ``read``."""
    if value is not None:
        return parse_flush(value, source="flush=")
    return parse_flush(env_value(FLUSH_ENV))


def read_flush(buffer: torch.Tensor, sink: torch.Tensor) -> None:
    """Read every element of ``buffer`` into the 0-dim ``sink`` of its dtype (no allocation, no sync).

    A sum depends on every element, so no kernel can skip a line of it; the result stays on the
    device and is never read back. float32 (no dtype cast: torch's fastest reduction path).
    """
    torch.sum(buffer, 0, out=sink)


class CudaTimerFacts(TypedDict):
    """What :meth:`CudaTimer.facts` tells a report (merged into the comparison's facts)."""

    timer: str
    flush: str
    flush_bytes: int
    flush_us: float | None
    gate_us: float
    max_enqueue_us: float
    host_bound_rounds: int
    sleep_cycles_per_us: float | None
    sleep_cycles_per_us_measured: list[float]


class CudaTimer(Unwatched):
    """CUDA-event timer of one device (``kind == "cuda"``)."""

    kind = "cuda"
    supports_graphs = True

    def __init__(self, device: DeviceInfo, flush: str | None = None) -> None:
        self.device = device
        self.torch_device = torch.device(device.torch_device)
        self.l2_bytes = device.l2_bytes or 50 * 2**20
        self.flush = flush_kind(flush)
        self._flush: torch.Tensor | None = None
        self._evict: Callable[[], None] | None = None
        self._cycles_per_s: float | None = None
        self.gate_calibrations: list[float] = []  # cycles per us at each (re)measurement
        self._gate_s = MIN_GATE_S
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.max_enqueue_s = 0.0
        self.host_bound = 0
        self.flush_s: float | None = None
        self._last_clock: ClockSample | None = None
        self._slot_mhz: list[float | None] = []
        self._recent: deque[float] = deque(maxlen=16)

    # ---- one-time setup ---------------------------------------------------------------------
    def _evictor(self) -> Callable[[], None]:
        """The flush of one sample (allocating its 2 x L2 float32 buffer on first use, timed once)."""
        if self._evict is None:
            buffer = torch.zeros(2 * self.l2_bytes // 4, dtype=torch.float32, device=self.torch_device)
            self._flush = buffer
            sink = torch.zeros((), dtype=torch.float32, device=self.torch_device)

            def evict() -> None:
                if self.flush == "read":
                    read_flush(buffer, sink)
                else:
                    buffer.zero_()

            start, end = self._event_pair(0)
            start.record()
            evict()
            end.record()
            end.synchronize()
            self.flush_s = start.elapsed_time(end) * 1e-3
            self._evict = evict
        return self._evict

    def _calibrate_gate(self, *, again: bool = False) -> float:
        """Cycles per second of ``torch.cuda._sleep`` (its unit is GPU clock cycles).

        Measured on first use and again (``again``) after each warm-up, when the clocks have
        ramped: the gate is a cycle count, so a rate read at idle clocks under-sizes it.
        """
        if self._cycles_per_s is None or again:
            cycles = 1_000_000
            start, end = self._event_pair(0)
            _CUDA._sleep(1000)
            start.record()
            _CUDA._sleep(cycles)
            end.record()
            end.synchronize()
            self._cycles_per_s = cycles / max(start.elapsed_time(end) * 1e-3, 1e-9)
            self.gate_calibrations.append(self._cycles_per_s / 1e6)
        return self._cycles_per_s

    def warmed_up(self) -> None:
        """Re-measure the gate's cycle rate now that warm-up has brought the clocks up."""
        self._calibrate_gate(again=True)

    def _event_pair(self, slot: int) -> tuple[torch.cuda.Event, torch.cuda.Event]:
        while len(self._events) <= slot:
            self._events.append((_CUDA.Event(enable_timing=True), _CUDA.Event(enable_timing=True)))
        return self._events[slot]

    # ---- Timer protocol ------------------------------------------------------------------------
    def now(self) -> float:
        return time.perf_counter()

    def job(self, name: str, call: Callable[[], object], mode: str) -> Job:
        if mode == "warm":
            return Job(name, call, flush=False, mode="warm", l2="warm")
        return Job(name, call, flush=True, mode="cold", l2="flushed")

    def graph_job(self, name: str, calls: Sequence[Callable[[], object]], per_replay: int, l2: str) -> Job:
        stream = _CUDA.Stream(device=self.torch_device)
        current = torch.cuda.current_stream(self.torch_device)
        stream.wait_stream(current)
        # Warm every input set on the capture stream first: lazy init (cuDNN plans, allocator
        # blocks) must not happen during capture.
        with torch.cuda.stream(stream):
            for call in calls:
                call()
        current.wait_stream(stream)
        torch.cuda.synchronize(self.torch_device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(per_replay):
                calls[i % len(calls)]()
        torch.cuda.synchronize(self.torch_device)
        return Job(name, graph.replay, calls_per_sample=per_replay, flush=False, mode="graph", l2=l2)

    def run_round(self, jobs: Sequence[Job]) -> list[float]:
        evict = self._evictor() if any(j.flush for j in jobs) else None
        cycles_per_s = self._calibrate_gate()
        gate_cycles = int(self._gate_s * cycles_per_s)
        pairs = []
        enqueue = 0.0
        self._slot_mhz = []
        for slot, job in enumerate(jobs):
            start, end = self._event_pair(slot)
            if job.flush and evict is not None:
                evict()
            # This side's clock, read right before its slot (issue 36.4: one reading per round cannot
            # tell the candidate's clock from the reference's). Read before the gate is queued: the
            # gate must hide the slot's launches, so a slow NVML call may not eat into it.
            clock = self.device.sample_clocks()
            self._slot_mhz.append(clock.sm_mhz if clock is not None else None)
            _CUDA._sleep(gate_cycles)
            t0 = time.perf_counter()
            start.record()
            job.call()
            end.record()
            enqueue = max(enqueue, time.perf_counter() - t0)
            pairs.append((start, end))
        pairs[-1][1].synchronize()
        self._last_clock = self.device.sample_clocks()
        self.max_enqueue_s = max(self.max_enqueue_s, enqueue)
        if enqueue > self._gate_s:
            self.host_bound += 1
        # Gate = 2 x the slowest recent enqueue: enough to hide it, and a one-off slow call
        # (cuDNN's first-call algorithm search) stops inflating the gate after 16 rounds.
        self._recent.append(enqueue)
        self._gate_s = min(MAX_GATE_S, max(MIN_GATE_S, 2.0 * max(self._recent)))
        return [s.elapsed_time(e) * 1e-3 / job.calls_per_sample for (s, e), job in zip(pairs, jobs)]

    def clocks(self) -> ClockSample | None:
        return self._last_clock

    def slot_clocks(self) -> Sequence[float | None]:
        """Each job's SM clock (MHz) read right before its slot in the last round (``slot_clocks``)."""
        return list(self._slot_mhz)

    @contextmanager
    def pinned(self) -> Iterator[None]:
        with torch.cuda.device(self.torch_device):
            yield

    def facts(self) -> CudaTimerFacts:
        return CudaTimerFacts(
            timer="cuda events",
            flush=self.flush,
            flush_bytes=2 * self.l2_bytes,
            flush_us=None if self.flush_s is None else self.flush_s * 1e6,
            gate_us=self._gate_s * 1e6,
            max_enqueue_us=self.max_enqueue_s * 1e6,
            host_bound_rounds=self.host_bound,
            sleep_cycles_per_us=None if self._cycles_per_s is None else self._cycles_per_s / 1e6,
            # Every measurement of the rate, first (possibly at idle clocks) to latest.
            sleep_cycles_per_us_measured=[round(c, 1) for c in self.gate_calibrations],
        )
