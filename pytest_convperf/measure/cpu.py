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

Tricks the thread clock would miss (issue 25 item 1, issue 37 item 2) are failed as
:class:`~pytest_convperf.measure.rule.TimingTrick`, each named by the words that open its message:

- ``TIMING TRICK``: a call that changes torch's thread count (checked after every call, and
  restored), and, in mode ``cpu-thread``, a side whose calls spend CPU time on other threads of
  the process (work moved to a worker thread; ``time.process_time_ns`` against the thread clock
  around each call: the median call's share after warm-up beyond the other side's by
  :data:`OTHER_THREADS_MARGIN` of its own thread time).
- ``WORK ELSEWHERE`` (mode ``cpu-thread``): a side whose calls wait off the CPU while not waiting
  for one. A thread blocked on another process (the conv done by a worker process over shared
  memory, the thread waiting on a pipe) costs no thread CPU time, and no other thread of this
  process runs; a call that was only preempted on a loaded box waited *for a CPU*, which the
  kernel counts per thread (``/proc/thread-self/schedstat``, run delay). So each call's wall time
  minus its run delay minus its thread time is the time it waited for something else; the median
  call's share of that beyond the other side's by :data:`WAITED_MARGIN` is the trick (an honest conv
  waits ~0: 0.00-0.02 ms of 10-90 ms calls beside two busy loops on the 2-core box, where a
  worker process gave 47-432 ms). Counting the children's CPU time instead would not do:
  ``RUSAGE_CHILDREN`` holds only children that have ended, and a worker need not be a child.
- ``CLOCK CHANGED``: the timed clock disagrees with its twin, the same kernel clock read through
  another function (``clock_gettime_ns`` of ``CLOCK_THREAD_CPUTIME_ID``, or ``CLOCK_MONOTONIC`` for
  the wall clock), read nested inside it around every call: a candidate that found the clock
  (through ``gc``: the timer, its module, the closures) and replaced it. Every clock is bound at
  import in the closure of :func:`_call_timer`, not an attribute of the timer; a candidate runs in
  this process and can still reach any of them, so the twin and the run delay check each other: a
  clock slowed during the candidate's calls shows as time the call waited (``WORK ELSEWHERE``) even
  when its twin is patched too. A candidate that patches every clock and this module's checks is
  beyond what an in-process timer can refuse (docs/running.md, "Cheats").

The thread clock stays the timed clock: it is what makes a loaded box's preemption cost nothing,
and the checks above make waiting elsewhere a failure instead of a gain.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypedDict

import torch

from pytest_convperf.core.env import load_avg
from pytest_convperf.measure.allocator import fix_allocator
from pytest_convperf.measure.protocol import Job, Unwatched
from pytest_convperf.measure.rule import TimingTrick

if TYPE_CHECKING:
    from pytest_convperf.core.clocks import ClockSample
    from pytest_convperf.core.device import DeviceInfo

# clock -> (timing mode stored in entries, the fact that names it)
CLOCKS: dict[str, tuple[str, str]] = {
    "thread": ("cpu-thread", "cpu thread_time_ns (CLOCK_THREAD_CPUTIME_ID)"),
    "wall": ("cpu", "cpu perf_counter_ns (wall clock: several threads)"),
}
# A side's CPU time on other threads of the process, as a share of its own thread time, beyond
# the other side's share. Background threads of the process (pytest's, the OS's) run during both
# sides' calls alike and cancel; a candidate handing its conv to a worker thread spends ~100 %.
# Shares are per call and judged by their median from the end of warm-up: an OpenMP worker left
# spinning by a several-thread op just before (the session's own setup) burned 17 % of the first
# 20 calls' time, and bursts on a loaded box landed 56-73 % on one side's sum over 10 rounds;
# a worker-thread cheat's share is sustained, every call.
OTHER_THREADS_MARGIN = 0.5
# A side's time off the CPU not waiting for a CPU, as a share of its thread time, beyond the other
# side's (median call from the end of warm-up). An honest call waits ~0 (a GIL hand-over, a page
# read); the worker-process cheat waited 4-10 x its own thread time.
WAITED_MARGIN = 0.5
# Rounds after warm-up before the shares are judged, and between judgements (a median per round
# of a 2000-round measurement would sort 2000 numbers each round); past 100 rounds, ~10 % of them.
OTHER_THREADS_MIN_ROUNDS = 10
# The median call's gap between the timed clock and its twin (read nested inside it: shorter by two
# clock reads), or the thread clock ahead of the wall clock, as a share of the call. Per call it is
# not ~0 on a VM: a vCPU stolen between two nested reads charged 68 us of a 0.86 ms call to the
# thread (load 11 on the 2-core box); the median call is untouched, a patched clock every call.
CLOCK_STRAY = 0.2
# What the two nested twin reads may add to a call (ns): 0.1-0.5 us each; the whole of a no-op call.
TWIN_SLACK_NS = 2_000

# Per call: ns of (timed clock, its twin, wall, process CPU, thread CPU, run delay or -1 unknown).
CallTimes = tuple[int, int, int, int, int, int]


def _call_timer() -> Callable[[Callable[[], object], bool, int], CallTimes]:
    """``time_call(call, wall_mode, schedstat_fd)``: one call between every clock, the clocks bound
    here at import (a candidate setting ``time.thread_time_ns`` or an attribute of the timer
    changes nothing; one reaching into this closure is caught by the twin and the run delay)."""
    thread, wall, process, gettime, pread = (
        time.thread_time_ns,
        time.perf_counter_ns,
        time.process_time_ns,
        time.clock_gettime_ns,
        os.pread,
    )
    thread_id, mono_id = time.CLOCK_THREAD_CPUTIME_ID, time.CLOCK_MONOTONIC

    def run_delay(fd: int) -> int:
        # /proc/thread-self/schedstat: "on-cpu-ns run-delay-ns timeslices"
        return int(pread(fd, 128, 0).split()[1]) if fd >= 0 else -1

    def time_call(call: Callable[[], object], wall_mode: bool, fd: int) -> CallTimes:
        q0 = run_delay(fd)
        p0 = process()
        w0 = wall()
        m0 = gettime(mono_id)
        t0 = thread()
        i0 = gettime(thread_id)
        call()
        i1 = gettime(thread_id)
        t1 = thread()
        m1 = gettime(mono_id)
        w1 = wall()
        p1 = process()
        q1 = run_delay(fd)
        t, w = t1 - t0, w1 - w0
        timed, twin = (w, m1 - m0) if wall_mode else (t, i1 - i0)
        return timed, twin, w, p1 - p0, t, (q1 - q0) if fd >= 0 else -1

    return time_call


_time_call = _call_timer()


def _open_schedstat() -> int:
    """The calling thread's schedstat file (its run delay), or -1 where it cannot be read (not Linux)."""
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        return -1
    try:
        int(os.pread(fd, 128, 0).split()[1])
    except (OSError, IndexError, ValueError):
        os.close(fd)
        return -1
    return fd


def _beyond(share: dict[str, float], margin: float) -> Iterator[tuple[str, float, float]]:
    """Each side whose share exceeds the other sides' smallest by more than ``margin``."""
    for name, mine in share.items():
        others = min(v for k, v in share.items() if k != name)
        if mine > others + margin:
            yield name, mine, others


class CpuTimerFacts(TypedDict):
    """What :meth:`CpuTimer.facts` tells a report (merged into the comparison's facts)."""

    timer: str
    clock: str
    threads: int
    allocator: str
    other_threads_share: dict[str, float]
    waited_share: dict[str, float] | str
    clocks: str
    load_avg: list[float]


class CpuTimer(Unwatched):
    """Thread-CPU-time timer for 1-thread CPU sessions (mode ``cpu-thread``), wall clock (mode
    ``cpu``) for several threads; L2 state ``n/a``."""

    kind = "cpu"
    supports_graphs = False

    def __init__(self, device: DeviceInfo) -> None:
        self.device = device
        self.threads = device.threads
        self.clock = "thread" if self.threads == 1 else "wall"
        self.mode, self._name = CLOCKS[self.clock]
        self.l2_bytes = 0
        self.allocator = fix_allocator()
        # Per job name, this measurement from the end of warm-up, per call: its CPU time on other
        # threads / its thread time, and its time waiting off the CPU (not for one) / its thread time.
        self._cpu: dict[str, list[float]] = {}
        self._waited: dict[str, list[float]] = {}
        self._stray: dict[str, list[float]] = {}  # per call: the timed clock's gap from its twin
        self._fd = -1  # the timing thread's schedstat, open while pinned (-1: run delay unknown)
        self._run_delay_known: bool | None = None

    def now(self) -> float:
        return time.perf_counter()  # the caps are wall time: a session's length is

    def job(self, name: str, call: Callable[[], object], mode: str) -> Job:
        return Job(name, call, flush=False, mode=self.mode, l2="n/a")

    def graph_job(self, name: str, calls: Sequence[Callable[[], object]], per_replay: int, l2: str) -> Job:
        raise NotImplementedError("CUDA graph mode needs a CUDA device; the CPU timer has no graphs")

    def run_round(self, jobs: Sequence[Job]) -> list[float]:
        out = []
        wall_mode = self.clock == "wall"
        for job in jobs:
            timed, twin, wall, process, thread, delay = _time_call(job.call, wall_mode, self._fd)
            self._check_threads(job.name)
            # A call that only waits (sleeps, I/O) uses ~no thread CPU time: 1 ns keeps it positive.
            out.append(max(timed, 1) * 1e-9 / job.calls_per_sample)
            # How far the timed clock strays from its twin, or the thread clock runs ahead of the wall,
            # beyond the two nested clock reads (all of a no-op call's time), as a share of the call.
            gap = max(abs(timed - twin), thread - wall) - TWIN_SLACK_NS
            stray = max(gap, 0) / max(timed, twin, 1)
            self._stray.setdefault(job.name, []).append(stray)
            if not wall_mode:
                own = max(thread, 1)
                self._cpu.setdefault(job.name, []).append(max(process - thread, 0) / own)
                if delay >= 0:
                    self._waited.setdefault(job.name, []).append(max(wall - delay - thread, 0) / own)
        self._check_shares()
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

    def waited_share(self) -> dict[str, float]:
        """Per side of the current measurement: the median call's time off the CPU while not waiting
        for a CPU (wall - run delay - thread time) over its own thread time; empty where the run
        delay cannot be read."""
        return {name: statistics.median(v) for name, v in self._waited.items() if v}

    def _check_shares(self) -> None:
        """Every :data:`OTHER_THREADS_MIN_ROUNDS` rounds after warm-up: the clocks, other threads,
        waiting elsewhere (see the module docstring)."""
        n = min((len(v) for v in self._stray.values()), default=0)
        # Every 10 rounds, then every ~10 % of them: each judgement sorts every list (a cheat is
        # sustained, so the first judgement after warm-up catches it).
        step = max(1, n // 10 // OTHER_THREADS_MIN_ROUNDS) * OTHER_THREADS_MIN_ROUNDS
        if n < OTHER_THREADS_MIN_ROUNDS or n % step:
            return
        for name, values in self._stray.items():
            stray = statistics.median(values)
            if stray > CLOCK_STRAY:
                clock = "wall clock" if self.clock == "wall" else "thread CPU clock"
                raise TimingTrick(
                    f"CLOCK CHANGED: during {name}'s timed calls the timer's {clock} strayed {stray:.0%} "
                    "from the same kernel clock read through clock_gettime_ns (median call; an untouched "
                    "clock strays ~0 %): the timing clock was replaced from inside the process (found "
                    "through gc: the timer, its module, its closures). A candidate computes; it does not "
                    "touch the timer."
                )
        if len(self._cpu) < 2:
            return
        for name, mine, others in _beyond(self.other_threads_share(), OTHER_THREADS_MARGIN):
            raise TimingTrick(
                f"TIMING TRICK: during {name}'s timed calls other threads of the process used "
                f"{mine:.0%} as much CPU time as its own thread (median call; during the other side's "
                f"{others:.0%}): "
                "work moved to a worker thread is invisible to the thread CPU clock "
                "(CLOCK_THREAD_CPUTIME_ID). Do the work on the calling thread, or time several "
                "threads with $CONVPERF_CPU_THREADS > 1 (wall clock)."
            )
        if len(self._waited) < 2:
            return
        for name, mine, others in _beyond(self.waited_share(), WAITED_MARGIN):
            raise TimingTrick(
                f"WORK ELSEWHERE: {name}'s timed calls waited off the CPU, not for a CPU, {mine:.0%} as "
                f"long as their own thread ran (median call; the other side's {others:.0%}): the call "
                "waited for work done elsewhere (another process, e.g. over shared memory), which "
                "costs the thread CPU clock nothing, or the timed clock was slowed. Do the work on the "
                "calling thread."
            )

    def clocks(self) -> ClockSample | None:
        return None

    def warmed_up(self) -> None:
        """Nothing depends on the clock rate; the other-thread and waited shares start here (see the
        margins)."""
        self._cpu, self._waited, self._stray = {}, {}, {}

    @contextmanager
    def pinned(self) -> Iterator[None]:
        saved = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        self._cpu, self._waited, self._stray = {}, {}, {}  # one measurement's shares
        # The timing thread's run delay (this thread's: the rounds run inside, on it).
        self._fd = _open_schedstat() if self.clock == "thread" else -1
        if self.clock == "thread":
            self._run_delay_known = self._fd >= 0
        try:
            yield
        finally:
            torch.set_num_threads(saved)
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = -1

    def facts(self) -> CpuTimerFacts:
        waited: dict[str, float] | str = {k: round(v, 4) for k, v in self.waited_share().items()}
        if self._run_delay_known is False:
            waited = "unknown: /proc/thread-self/schedstat unreadable (waiting elsewhere is not checked)"
        return CpuTimerFacts(
            timer=self._name,
            clock=self.clock,
            threads=self.threads,
            allocator=self.allocator,
            other_threads_share={k: round(v, 4) for k, v in self.other_threads_share().items()},
            waited_share=waited,
            clocks="n/a (cpu)",
            load_avg=load_avg(),
        )
