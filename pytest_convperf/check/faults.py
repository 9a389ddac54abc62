"""How a check's faults become clear failures: errors in timed calls and lost CUDA contexts
(:func:`device_errors`), and a per-check time limit (``--convperf-check-timeout``,
:func:`deadline`), so that a hung check fails instead of running for many minutes and skipping.

``SIGALRM`` interrupts the main thread between bytecodes and inside ``time.sleep`` and most
blocking calls (PEP 475: the handler's exception ends them). A hang inside one long C call ends
when the call returns to Python. The limit is not set when another itimer (e.g. pytest-timeout's
signal method) is running: then it does nothing.

A candidate can defeat the alarm (``except BaseException`` in a loop, ``signal.signal(SIGALRM,
SIG_IGN)``), so a watchdog thread backs it: when the check is still running ``grace_s(limit)``
after its limit, the thread hands the check's row to ``on_overrun`` (the check journals it) and
ends the process with :data:`EXIT_HUNG`; under xdist the controller reports the crashed worker and
folds the journal's row in, and ``python -m pytest_convperf report DIR`` shows it after a plain
run. A thread, not a process outside: only the process knows how far the check got (its stage
and rounds, :class:`CheckProgress`), and the check runs inside pytest's process by design. Its
limit: a C call that holds the GIL for ever stops the thread too (as it stops signal handlers).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING

import pytest

from pytest_convperf.core.device import is_sticky_cuda_error
from pytest_convperf.correctness.candidate_run import raised
from pytest_convperf.measure.rule import TimedCallError
from pytest_convperf.reports.progress import Tally

if TYPE_CHECKING:
    from pytest_convperf.core.device import DeviceInfo


class CheckTimeout(BaseException):
    """A check ran past its time limit. A ``BaseException``, like pytest's outcomes, so that no
    ``except Exception`` in a candidate or in the timing loop can swallow it."""


EXIT_HUNG = 124  # the process's exit status when the watchdog ends it (timeout(1)'s convention)


# A check calls its candidate (and reference) this often outside the round caps, which bound the
# rest: correctness (2), memory facts (1), per measurement (screen and confirm) the warm-up's 3
# minimum calls, a round of its first window and one round past its hard cap (2 x 5), integrity
# after timing (3), kernel table (1). A slow candidate's limit grows by SLOW_MARGIN x these calls x
# its slowest timed call, so that it completes with few rounds (judged by the few-rounds rule, a
# FAIL with its numbers) instead of failing as hung.
CALLS_OUTSIDE_CAPS = 17
SLOW_MARGIN = 3.0
MIN_EXTENSION_S = 1.0  # smaller extensions are not applied: a fast check's limit stays the one named


@dataclass
class CheckProgress:
    """How far a check got: the stage it is in (set as it goes), the rounds its timer ran and the
    slowest call they timed (which extends the limit, :meth:`limit`)."""

    stage: str = "starting"
    rounds: Tally = field(default_factory=lambda: Tally(""))
    slowest_call_s: float = 0.0
    _last_round: float | None = None

    def at(self, stage: str) -> None:
        self.stage = stage

    def observe_round(self, stage: str, index: int, names: Sequence[str], times: Sequence[float]) -> None:
        """A timed round: its calls' times, and its wall time (the clock of the caps and the limit:
        a CPU timer's thread time does not see a call that waits) over its calls."""
        self.rounds.observe(stage, index, names, times)
        now = time.monotonic()
        last, self._last_round = self._last_round, now
        wall = (now - last) / max(1, len(times)) if index and last is not None else 0.0
        self.slowest_call_s = max(self.slowest_call_s, wall, *times)

    def extension_s(self) -> float:
        extra = SLOW_MARGIN * CALLS_OUTSIDE_CAPS * self.slowest_call_s
        return extra if extra >= MIN_EXTENSION_S else 0.0

    def limit(self, seconds: float) -> float:
        """The check's limit: ``seconds``, plus :meth:`extension_s` for a slow candidate."""
        return seconds + self.extension_s()

    def describe(self) -> str:
        """``during the first measurement (first measurement, 4 rounds)``, ``during correctness (...)``."""
        seen = self.rounds.passes or self.rounds.warmup_rounds
        rounds = self.rounds.text().removeprefix(": ") if seen else "no timed rounds yet"
        return f"during {self.stage} ({rounds})"


def grace_s(limit: float) -> float:
    """How long after its limit a check that ignored the stop may run before the process is ended."""
    return max(5.0, 0.25 * limit)


def timeout_message(what: str, seconds: float, progress: CheckProgress) -> str:
    extra = progress.extension_s()
    slow = (
        f" ({seconds:g} s + {extra:.0f} s for {CALLS_OUTSIDE_CAPS} calls of its slowest, "
        f"{progress.slowest_call_s:.3g} s)"
        if extra
        else ""
    )
    return (
        f"{what} ran past its {progress.limit(seconds):.4g} s limit{slow} and was stopped "
        f"{progress.describe()}: a hung candidate, or one far slower than its time caps allow. Raise "
        "it with --convperf-check-timeout=SECONDS (ini convperf_check_timeout; 0 turns it off)"
    )


def _watchdog(
    seconds: float,
    progress: CheckProgress,
    done: threading.Event,
    message: Callable[[], str],
    on_overrun: Callable[[str], None],
) -> None:
    """Start the thread that ends the process when the check outlives its limit by :func:`grace_s`."""
    start = time.monotonic()

    def watch() -> None:
        while True:
            limit = progress.limit(seconds)
            left = start + limit + grace_s(limit) - time.monotonic()
            if left <= 0:
                break
            if done.wait(left):
                return
        text = message()
        try:
            on_overrun(text)
        finally:
            stream = sys.__stderr__
            if stream is not None:
                stream.write(
                    f"\nconvperf: {text}. The candidate did not stop (it caught the stop or ignored "
                    f"SIGALRM) within {grace_s(limit):g} s more: the process is ended (exit {EXIT_HUNG})\n"
                )
                stream.flush()
            os._exit(EXIT_HUNG)

    threading.Thread(target=watch, name="convperf-watchdog", daemon=True).start()


@contextmanager
def deadline(
    seconds: float,
    what: str,
    progress: CheckProgress | None = None,
    on_overrun: Callable[[str], None] | None = None,
) -> Iterator[str | None]:
    """Raise :class:`CheckTimeout` in the main thread after ``seconds`` (0: no limit), extended for a
    slow candidate by ``progress`` (:meth:`CheckProgress.limit`); with ``on_overrun``, end the
    process if the check still runs :func:`grace_s` later (module docstring).

    Yields None when the limit is armed, else why it is not.
    """
    if seconds <= 0:
        yield "off (--convperf-check-timeout=0)"
        return
    if hasattr(signal, "setitimer") and signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        yield "not armed: another timer (pytest-timeout?) holds SIGALRM"
        return
    progress = progress if progress is not None else CheckProgress()
    done = threading.Event()
    start = time.monotonic()
    if on_overrun is not None:
        _watchdog(seconds, progress, done, lambda: timeout_message(what, seconds, progress), on_overrun)
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        try:  # the watchdog alone holds the limit
            yield "SIGALRM not armed (it needs the main thread of a Unix process); the watchdog is"
        finally:
            done.set()
        return

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        left = start + progress.limit(seconds) - time.monotonic()
        if left > 0:  # a slow candidate's limit grew since the alarm was set
            signal.setitimer(signal.ITIMER_REAL, left)
            return
        raise CheckTimeout(timeout_message(what, seconds, progress))

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield None
    finally:
        done.set()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def device_errors(device: DeviceInfo, nodeid: str, problem_id: str) -> Iterator[None]:
    """Turn errors inside timed calls into clear failures; a lost CUDA context stops CUDA tests."""
    try:
        yield
    except TimedCallError as exc:
        cause = exc.__cause__ or exc
        if device.is_cuda and is_sticky_cuda_error(cause):
            device.mark_lost(nodeid, str(cause))
            pytest.fail(
                f"CUDA context lost while timing {problem_id}: {exc}\n"
                "The remaining CUDA tests of this process are skipped; rerun with CUDA_LAUNCH_BLOCKING=1 "
                "to locate the faulting kernel.",
                pytrace=False,
            )
        pytest.fail(f"timing {problem_id} failed: {exc}\n  {raised(cause)}", pytrace=False)
    except Exception as exc:
        if device.is_cuda and is_sticky_cuda_error(exc):
            device.mark_lost(nodeid, str(exc))
            pytest.fail(
                f"CUDA context lost on {problem_id}: {exc}\nThe remaining CUDA tests of this process are "
                "skipped; rerun with CUDA_LAUNCH_BLOCKING=1 to locate the faulting kernel.",
                pytrace=False,
            )
        raise
