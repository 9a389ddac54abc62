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

Both sides must see the same allocator state: the first CPU timer of a process fixes glibc's
mmap and trim thresholds (:mod:`.allocator`), without which a conv against itself read 0.67-1.17.

Tricks the thread clock would miss (issue 25 item 1) are failed as :class:`TimingTrick`:
a call that changes torch's thread count (checked after every call, and restored), and, in mode
``cpu-thread``, a side whose calls spend CPU time on other threads of the process (work moved to
a worker thread; ``time.process_time_ns`` against the thread clock around each call: the
median call's share after warm-up beyond the other side's by :data:`OTHER_THREADS_MARGIN` of its
own thread time).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from pytest_convperf.core.env import load_avg
from pytest_convperf.measure.allocator import fix_allocator
from pytest_convperf.measure.protocol import Job, Unwatched
from pytest_convperf.measure.rule import TimedCallError

if TYPE_CHECKING:
    from pytest_convperf.core.device import ClockSample, DeviceInfo

# clock -> (timing mode stored in entries, the fact that names it, the clock function)
CLOCKS: dict[str, tuple[str, str, Callable[[], int]]] = {
    "thread": ("cpu-thread", "cpu thread_time_ns (CLOCK_THREAD_CPUTIME_ID)", time.thread_time_ns),
    "wall": ("cpu", "cpu perf_counter_ns (wall clock: several threads)", time.perf_counter_ns),
}
# A side's CPU time on other threads of the process, as a share of its own thread time, beyond
# the other side's share. Background threads of the process (pytest's, the OS's) run during both
# sides' calls alike and cancel; a candidate handing its conv to a worker thread spends ~100 %.
# Shares are per call and judged by their median from the end of warm-up: an OpenMP worker left
# spinning by a several-thread op just before (the session's own setup) burned 17 % of the first
# 20 calls' time, and bursts on a loaded box landed 56-73 % on one side's sum over 10 rounds;
# a worker-thread cheat's share is sustained, every call.
OTHER_THREADS_MARGIN = 0.5
# Rounds after warm-up before the shares are judged, and between judgements (a median per round
# of a 2000-round measurement would sort 2000 numbers each round).
OTHER_THREADS_MIN_ROUNDS = 10


class TimingTrick(TimedCallError):
    """A timed call did its work where the timer cannot see it (another thread, more threads)."""


class CpuTimer(Unwatched):
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
        self.allocator = fix_allocator()
        # Per job name: each call's CPU time on other threads / its thread time, this measurement.
        self._cpu: dict[str, list[float]] = {}

    def now(self) -> float:
        return time.perf_counter()  # the caps are wall time: a session's length is

    def job(self, name: str, call: Callable[[], object], mode: str) -> Job:
        return Job(name, call, flush=False, mode=self.mode, l2="n/a")

    def graph_job(self, name: str, calls: Sequence[Callable[[], object]], per_replay: int, l2: str) -> Job:
        raise NotImplementedError("CUDA graph mode needs a CUDA device; the CPU timer has no graphs")

    def run_round(self, jobs: Sequence[Job]) -> list[float]:
        out = []
        clock = self._clock
        process = time.process_time_ns
        for job in jobs:
            p0 = process()
            start = clock()
            job.call()
            elapsed = clock() - start
            spent = process() - p0
            self._check_threads(job.name)
            # A call that only waits (sleeps, I/O) uses ~no thread CPU time: 1 ns keeps it positive.
            out.append(max(elapsed, 1) * 1e-9 / job.calls_per_sample)
            if self.clock == "thread":
                self._cpu.setdefault(job.name, []).append(max(spent - elapsed, 0) / max(elapsed, 1))
        if self.clock == "thread":
            self._check_other_threads()
        return out

    def _check_threads(self, name: str) -> None:
        now = torch.get_num_threads()
        if now != self.threads:
            torch.set_num_threads(self.threads)
            raise TimingTrick(
                f"TIMING TRICK: {name} changed torch's thread count from {self.threads} to {now} inside a "
                f"timed call (torch.set_num_threads), so its work ran on threads the other side did not "
                f"get; the count was restored. Time the conv with the session's thread count "
                f"($CONVPERF_CPU_THREADS) instead of setting it in the candidate."
            )

    def other_threads_share(self) -> dict[str, float]:
        """Per side of the current measurement: the median call's CPU time on other threads of the
        process over its own thread time."""
        return {name: statistics.median(v) for name, v in self._cpu.items() if v}

    def _check_other_threads(self) -> None:
        n = min((len(v) for v in self._cpu.values()), default=0)
        if len(self._cpu) < 2 or n < OTHER_THREADS_MIN_ROUNDS or n % OTHER_THREADS_MIN_ROUNDS:
            return
        share = self.other_threads_share()
        for name, mine in share.items():
            others = min(v for k, v in share.items() if k != name)
            if mine > others + OTHER_THREADS_MARGIN:
                raise TimingTrick(
                    f"TIMING TRICK: during {name}'s timed calls other threads of the process used "
                    f"{mine:.0%} as much CPU time as its own thread (median call; during the other side's "
                    f"{others:.0%}): "
                    "work moved to a worker thread is invisible to the thread CPU clock "
                    "(CLOCK_THREAD_CPUTIME_ID). Do the work on the calling thread, or time several "
                    "threads with $CONVPERF_CPU_THREADS > 1 (wall clock)."
                )

    def clocks(self) -> ClockSample | None:
        return None

    def warmed_up(self) -> None:
        """Nothing depends on the clock rate; the other-thread shares start here (see the margin)."""
        self._cpu = {}

    @contextmanager
    def pinned(self) -> Iterator[None]:
        saved = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        self._cpu = {}  # one measurement's other-thread shares
        try:
            yield
        finally:
            torch.set_num_threads(saved)

    def facts(self) -> dict[str, Any]:
        return {
            "timer": self._name,
            "clock": self.clock,
            "threads": self.threads,
            "allocator": self.allocator,
            "other_threads_share": {k: round(v, 4) for k, v in self.other_threads_share().items()},
            "clocks": "n/a (cpu)",
            "load_avg": load_avg(),
        }
