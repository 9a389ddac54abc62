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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING

import pytest

from pytest_convperf.correctness import raised
from pytest_convperf.device import is_sticky_cuda_error
from pytest_convperf.progress import Tally
from pytest_convperf.timing.rule import TimedCallError

if TYPE_CHECKING:
    from pytest_convperf.device import DeviceInfo


class CheckTimeout(BaseException):
    """A check ran past its time limit. A ``BaseException``, like pytest's outcomes, so that no
    ``except Exception`` in a candidate or in the timing loop can swallow it."""


EXIT_HUNG = 124  # the process's exit status when the watchdog ends it (timeout(1)'s convention)


@dataclass
class CheckProgress:
    """How far a check got: the stage it is in (set as it goes) and the rounds its timer ran."""

    stage: str = "starting"
    rounds: Tally = field(default_factory=lambda: Tally(""))

    def at(self, stage: str) -> None:
        self.stage = stage

    def observe_round(self, stage: str, index: int, names: Sequence[str], times: Sequence[float]) -> None:
        self.rounds.observe(stage, index, names, times)

    def describe(self) -> str:
        """``during the first measurement (timing, 4 rounds)``."""
        seen = self.rounds.passes or self.rounds.warmup_rounds
        rounds = self.rounds.text().removeprefix(": ") if seen else "no timed rounds yet"
        return f"during {self.stage} ({rounds})"


def grace_s(limit: float) -> float:
    """How long after its limit a check that ignored the stop may run before the process is ended."""
    return max(5.0, 0.25 * limit)


def timeout_message(what: str, seconds: float, progress: CheckProgress) -> str:
    return (
        f"{what} ran past its {seconds:g} s limit and was stopped {progress.describe()}: a hung "
        "candidate, or one far slower than its time caps allow. Raise it with "
        "--convperf-check-timeout=SECONDS (ini convperf_check_timeout; 0 turns it off)"
    )


def _watchdog(
    seconds: float, done: threading.Event, message: Callable[[], str], on_overrun: Callable[[str], None]
) -> None:
    """Start the thread that ends the process when the check outlives its limit by :func:`grace_s`."""

    def watch() -> None:
        if done.wait(seconds + grace_s(seconds)):
            return
        text = message()
        try:
            on_overrun(text)
        finally:
            stream = sys.__stderr__
            if stream is not None:
                stream.write(
                    f"\nconvperf: {text}. The candidate did not stop (it caught the stop or ignored "
                    f"SIGALRM) within {grace_s(seconds):g} s more: the process is ended (exit {EXIT_HUNG})\n"
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
    """Raise :class:`CheckTimeout` in the main thread after ``seconds`` (0: no limit); with
    ``on_overrun``, end the process if the check still runs :func:`grace_s` later (module docstring).

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
    if on_overrun is not None:
        _watchdog(seconds, done, lambda: timeout_message(what, seconds, progress), on_overrun)
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        try:  # the watchdog alone holds the limit
            yield "SIGALRM not armed (it needs the main thread of a Unix process); the watchdog is"
        finally:
            done.set()
        return

    def on_alarm(signum: int, frame: FrameType | None) -> None:
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
