"""CPU timer: the calling thread's CPU time around each call, with a fixed thread count.

On a shared CPU box the wall clock follows the machine's load: with two busy loops beside it a
1-thread depthwise conv's wall-clock median went from 4.6 to 13.5 ms while its thread CPU time
moved about 10 % (issue 15). So a 1-thread session times with ``time.thread_time_ns``
(``CLOCK_THREAD_CPUTIME_ID``): time the thread is preempted does not count. That needs all of a
call's work on the timed thread: torch's intra-op threads are pinned to the session's count, and
a session of several threads (``$CONVPERF_CPU_THREADS`` > 1), whose work spreads over threads
this clock does not see, times with the wall clock (``perf_counter_ns``) instead. The two are
distinct timing modes (``cpu-thread``, ``cpu``), stored in baseline entries and never compared.

The thread count is the one the session started with (it is part of the machine slug), pinned
with ``torch.set_num_threads`` for the measurement and restored afterwards, so a test that
changes it cannot make the next comparison incomparable with its baseline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from pytest_convperf.env import load_avg
from pytest_convperf.timing.protocol import Job

if TYPE_CHECKING:
    from pytest_convperf.device import ClockSample, DeviceInfo

# clock -> (timing mode stored in entries, the fact that names it, the clock function)
CLOCKS: dict[str, tuple[str, str, Callable[[], int]]] = {
    "thread": ("cpu-thread", "cpu thread_time_ns (CLOCK_THREAD_CPUTIME_ID)", time.thread_time_ns),
    "wall": ("cpu", "cpu perf_counter_ns (wall clock: several threads)", time.perf_counter_ns),
}


class CpuTimer:
    """Thread-CPU-time timer for 1-thread CPU sessions (mode ``cpu-thread``), wall clock (mode
    ``cpu``) for several threads; L2 state ``n/a``."""

    kind = "cpu"
    supports_graphs = False

    def __init__(self, device: DeviceInfo) -> None:
        self.device = device
        self.threads = device.threads
        self.clock = "thread" if self.threads == 1 else "wall"
        self.mode, self._name, self._clock = CLOCKS[self.clock]
        self.l2_bytes = 0

    def now(self) -> float:
        return time.perf_counter()  # the caps are wall time: a session's length is

    def job(self, name: str, call: Callable[[], object], mode: str) -> Job:
        return Job(name, call, flush=False, mode=self.mode, l2="n/a")

    def graph_job(self, name: str, calls: Sequence[Callable[[], object]], per_replay: int, l2: str) -> Job:
        raise NotImplementedError("CUDA graph mode needs a CUDA device; the CPU timer has no graphs")

    def run_round(self, jobs: Sequence[Job]) -> list[float]:
        out = []
        clock = self._clock
        for job in jobs:
            start = clock()
            job.call()
            # A call that only waits (sleeps, I/O) uses ~no thread CPU time: 1 ns keeps it positive.
            out.append(max(clock() - start, 1) * 1e-9 / job.calls_per_sample)
        return out

    def clocks(self) -> ClockSample | None:
        return None

    def warmed_up(self) -> None:
        """Nothing depends on the clock rate here."""

    @contextmanager
    def pinned(self) -> Iterator[None]:
        saved = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            yield
        finally:
            torch.set_num_threads(saved)

    def facts(self) -> dict[str, Any]:
        return {
            "timer": self._name,
            "clock": self.clock,
            "threads": self.threads,
            "clocks": "n/a (cpu)",
            "load_avg": load_avg(),
        }
