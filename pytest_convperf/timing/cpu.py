"""CPU timer: ``perf_counter_ns`` around each call, with a fixed thread count.

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

from pytest_convperf.timing.protocol import Job

if TYPE_CHECKING:
    from pytest_convperf.device import ClockSample, DeviceInfo


class CpuTimer:
    """Wall-clock timer for CPU candidates (mode ``cpu``, L2 state ``n/a``)."""

    kind = "cpu"
    supports_graphs = False

    def __init__(self, device: DeviceInfo) -> None:
        self.device = device
        self.threads = device.threads
        self.l2_bytes = 0

    def now(self) -> float:
        return time.perf_counter()

    def job(self, name: str, call: Callable[[], object], mode: str) -> Job:
        return Job(name, call, flush=False, mode="cpu", l2="n/a")

    def graph_job(self, name: str, calls: Sequence[Callable[[], object]], per_replay: int, l2: str) -> Job:
        raise NotImplementedError("CUDA graph mode needs a CUDA device; the CPU timer has no graphs")

    def run_round(self, jobs: Sequence[Job]) -> list[float]:
        out = []
        clock = time.perf_counter_ns
        for job in jobs:
            start = clock()
            job.call()
            out.append((clock() - start) * 1e-9 / job.calls_per_sample)
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
        return {"timer": "cpu perf_counter_ns", "threads": self.threads, "clocks": "n/a (cpu)"}
