"""The :class:`Timer` protocol and the :class:`Job` it times (see :mod:`pytest_convperf.measure.timers`).

Kept apart from the package's entry points so every timer and the rounds engine import it
without importing the package that builds them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pytest_convperf.core.clocks import ClockSample

# Modes of a timed job. ``cold``/``warm``/``graph`` exist on CUDA; ``cpu`` and ``fake`` are
# the only modes of their timers.
MODES = ("auto", "cold", "warm", "graph")
# What ``auto`` resolves to (``results.MEASURED_MODES`` are all the modes a measurement can have).
AUTO_CHOICES = ("cold", "graph")


@dataclass(frozen=True)
class Job:
    """One thing to time. ``call()`` runs it once; a sample is elapsed / ``calls_per_sample``.

    ``flush`` asks the timer to evict L2 before the sample (outside the timed region).
    ``mode`` and ``l2`` describe the job for the report (``Measurement.mode``/``.l2``).
    ``before(round_index)``, when set, runs before each round that times this job, outside the
    timed region (fresh input values: :meth:`pytest_convperf.check.calls.InputSets.refresh`).
    """

    name: str
    call: Callable[[], object]
    calls_per_sample: int = 1
    flush: bool = True
    mode: str = "cold"
    l2: str = "flushed"
    before: Callable[[int], object] | None = None


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

    def facts(self) -> Mapping[str, object]:
        """What a report should know about this timer (flush bytes, gate, threads, ...): JSON-able
        values, merged into the comparison's facts (each built-in timer returns its own TypedDict)."""
        ...

    def observe_round(self, stage: str, index: int, names: Sequence[str], times: Sequence[float]) -> None:
        """Called by the rounds engine after every round (``stage`` is ``warm-up`` or ``timing``)
        with each job's seconds per call, in ``names``' order. A watcher (the live progress line,
        :class:`pytest_convperf.reports.progress.ProgressTimer`) sees the rounds here; it never
        steers the measurement. Timers nothing watches inherit :class:`Unwatched`'s no-op."""
        ...


class Unwatched:
    """The no-op ``observe_round`` of a timer nothing watches (every concrete timer; a watching
    proxy such as ``ProgressTimer`` defines its own)."""

    def observe_round(self, stage: str, index: int, names: Sequence[str], times: Sequence[float]) -> None:
        return None


def slot_clocks(timer: Timer) -> Sequence[float | None] | None:
    """The SM clock (MHz) read right before each job's slot of the timer's last round, in the jobs'
    order, where the timer reads one per slot (``CudaTimer`` with NVML, ``FakeTimer`` given
    ``slot_clocks``); None otherwise. An optional capability, not part of :class:`Timer`: a CPU has
    no clock to read, and ``Timer.clocks`` (one reading per round) cannot tell the sides apart."""
    read = getattr(timer, "slot_clocks", None)
    return read() if callable(read) else None


__all__ = ["AUTO_CHOICES", "MODES", "Job", "Timer", "Unwatched", "slot_clocks"]
