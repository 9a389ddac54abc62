"""Timers behind one protocol, and the entry points the plugin uses.

A :class:`Timer` times *rounds*: ``run_round(jobs)`` runs every job once, in the given order,
and returns one sample (seconds per call) for each. ``cuda.CudaTimer`` uses CUDA events with
an L2 flush and a device-side gate, ``cpu.CpuTimer`` uses ``perf_counter_ns`` with a fixed
thread count, and ``fake.FakeTimer`` replays given durations so the plugin's own tests drive
warm-up and stopping deterministically. Warm-up and the adaptive paired rounds live in
:mod:`pytest_convperf.timing.rounds`, shared by all timers.

Selecting the fake timer: set ``CONVPERF_FAKE_TIMER`` to a JSON replay file (see
:meth:`fake.FakeTimer.from_file`), or override the ``convperf_timer`` fixture in a conftest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pytest_convperf.device import ClockSample, DeviceInfo
    from pytest_convperf.results import Measurement

FAKE_TIMER_ENV = "CONVPERF_FAKE_TIMER"

# Modes of a timed job. ``cold``/``warm``/``graph`` exist on CUDA; ``cpu`` and ``fake`` are
# the only modes of their timers.
MODES = ("auto", "cold", "warm", "graph")
# How a measurement was timed (``Measurement.mode``), what a baseline entry stores; ``auto``
# resolves to one of ``AUTO_CHOICES``.
MEASURED_MODES = ("cold", "warm", "graph", "cpu", "fake")
AUTO_CHOICES = ("cold", "graph")
# CUDA L2 flush kinds of a cold sample (``cuda.CudaTimer(flush=...)``, ``$CONVPERF_L2_FLUSH``).
FLUSH_KINDS = ("read", "write")


@dataclass(frozen=True)
class Job:
    """One thing to time. ``call()`` runs it once; a sample is elapsed / ``calls_per_sample``.

    ``flush`` asks the timer to evict L2 before the sample (outside the timed region).
    ``mode`` and ``l2`` describe the job for the report (``Measurement.mode``/``.l2``).
    """

    name: str
    call: Callable[[], object]
    calls_per_sample: int = 1
    flush: bool = True
    mode: str = "cold"
    l2: str = "flushed"


@runtime_checkable
class Timer(Protocol):
    """What the rounds engine needs from a clock. All times are seconds."""

    kind: str  # "cuda", "cpu" or "fake"
    l2_bytes: int
    supports_graphs: bool

    def now(self) -> float:
        """The clock that time caps are measured on (wall time; simulated for the fake)."""
        ...

    def job(self, name: str, call: Callable[[], object], mode: str) -> Job:
        """A job for ``call`` in ``mode`` (``cold``, ``warm``); timers map it to what they support."""
        ...

    def graph_job(self, name: str, calls: Sequence[Callable[[], object]], per_replay: int, l2: str) -> Job:
        """A job replaying a CUDA graph of ``per_replay`` calls cycling over ``calls``."""
        ...

    def run_round(self, jobs: Sequence[Job]) -> list[float]:
        """Run each job once in order; return seconds per call for each."""
        ...

    def clocks(self) -> ClockSample | None:
        """Clock state right after the last round (None: clocks unknown)."""
        ...

    def warmed_up(self) -> None:
        """Called after each warm-up: re-size what depends on the clocks (the CUDA launch gate)."""
        ...

    def pinned(self) -> AbstractContextManager[None]:
        """Context in which measurements run (fixed thread count on a CPU)."""
        ...

    def facts(self) -> dict[str, Any]:
        """What a report should know about this timer (flush bytes, gate, threads, ...)."""
        ...


def make_timer(device_info: DeviceInfo) -> Timer:
    """The timer for a device; ``$CONVPERF_FAKE_TIMER`` (a JSON replay file) selects the fake."""
    path = os.environ.get(FAKE_TIMER_ENV)
    if path:
        from pytest_convperf.timing.fake import FakeTimer

        return FakeTimer.from_file(path)
    if device_info.is_cuda:
        from pytest_convperf.timing.cuda import CudaTimer

        return CudaTimer(device_info)
    from pytest_convperf.timing.cpu import CpuTimer

    return CpuTimer(device_info)


class TimerCallable:
    """The ``gpu_timer`` fixture: ``gpu_timer(fn, *, mode="cold") -> Measurement``.

    Warm-up, then adaptive rounds until the 95 % CI of the median is within +-0.5 % (+-1 %
    under 10 us) or a cap. ``mode`` is ``cold`` (L2 flushed before each sample), ``warm``,
    ``graph`` (CUDA graph replay of K calls, for kernels under ~20 us) or ``auto`` (cold,
    switching to graph for short kernels). On a CPU every mode times with ``perf_counter_ns``.
    """

    def __init__(self, timer: Timer) -> None:
        self.timer = timer

    def __call__(self, fn: Callable[[], object], *, mode: str = "cold", **rule: Any) -> Measurement:
        from pytest_convperf.timing.rounds import StopRule, measure_one

        return measure_one(self.timer, fn, mode=mode, rule=StopRule.for_timer(self.timer, **rule))


def make_timer_callable(device_info: DeviceInfo, timer: Timer | None = None) -> TimerCallable:
    """The object behind the ``gpu_timer`` fixture."""
    return TimerCallable(timer if timer is not None else make_timer(device_info))


__all__ = [
    "AUTO_CHOICES",
    "FAKE_TIMER_ENV",
    "FLUSH_KINDS",
    "MEASURED_MODES",
    "MODES",
    "Job",
    "Timer",
    "TimerCallable",
    "make_timer",
    "make_timer_callable",
]
