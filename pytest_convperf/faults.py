"""How a check's faults become clear failures: errors in timed calls and lost CUDA contexts
(:func:`device_errors`), and a per-check time limit (``--convperf-check-timeout``,
:func:`deadline`), so that a hung check fails instead of running for many minutes and skipping.

``SIGALRM`` interrupts the main thread between bytecodes and inside ``time.sleep`` and most
blocking calls (PEP 475: the handler's exception ends them). A hang inside one long C call ends
when the call returns to Python. The limit is not set off the main thread, nor when another
itimer (e.g. pytest-timeout's signal method) is running: then it does nothing and says so in the
check's facts.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

import pytest

from pytest_convperf.correctness import raised
from pytest_convperf.device import is_sticky_cuda_error
from pytest_convperf.timing.rule import TimedCallError

if TYPE_CHECKING:
    from pytest_convperf.device import DeviceInfo


class CheckTimeout(BaseException):
    """A check ran past its time limit. A ``BaseException``, like pytest's outcomes, so that no
    ``except Exception`` in a candidate or in the timing loop can swallow it."""


@contextmanager
def deadline(seconds: float, what: str) -> Iterator[str | None]:
    """Raise :class:`CheckTimeout` in the main thread after ``seconds`` (0: no limit).

    Yields None when the limit is armed, else why it is not.
    """
    if seconds <= 0:
        yield "off (--convperf-check-timeout=0)"
        return
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield "not armed: SIGALRM needs the main thread of a Unix process"
        return
    if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        yield "not armed: another timer (pytest-timeout?) holds SIGALRM"
        return

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise CheckTimeout(
            f"{what} ran past its {seconds:g} s limit and was stopped: a hung candidate, or one far "
            "slower than its time caps allow. Raise it with --convperf-check-timeout=SECONDS (ini "
            "convperf_check_timeout; 0 turns it off)"
        )

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield None
    finally:
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
