"""Timers behind one protocol, and the entry points the plugin uses.

A :class:`Timer` times *rounds*: ``run_round(jobs)`` runs every job once, in the given order,
and returns one sample (seconds per call) for each. ``cuda.CudaTimer`` uses CUDA events with
an L2 flush and a device-side gate, ``cpu.CpuTimer`` uses the calling thread's CPU time
(``thread_time_ns``) in a 1-thread session and the wall clock (``perf_counter_ns``) with several
threads, at a fixed thread count, and ``fake.FakeTimer`` replays given durations so the
plugin's own tests drive warm-up and stopping deterministically. Warm-up and the adaptive paired
rounds live in :mod:`pytest_convperf.measure.rounds`, shared by all timers.

Selecting the fake timer: set ``CONVPERF_FAKE_TIMER`` to a JSON replay file (see
:meth:`fake.FakeTimer.from_file`), or override the ``convperf_timer`` fixture in a conftest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_convperf.core.environment import FAKE_TIMER_ENV, env_value
from pytest_convperf.measure.protocol import Timer

if TYPE_CHECKING:
    from pytest_convperf.core.config import ConvperfConfig
    from pytest_convperf.core.device import DeviceInfo
    from pytest_convperf.core.results import Measurement


def make_timer(device_info: DeviceInfo, cfg: ConvperfConfig | None = None) -> Timer:
    """The timer for a device: the fake when ``cfg.fake_timer`` (``$CONVPERF_FAKE_TIMER``, a JSON replay
    file) names one, else CUDA events with ``cfg.l2_flush`` or the CPU clock. Without ``cfg`` (outside
    pytest) the environment is read as the session's config reads it."""
    if cfg is None:
        fake = env_value(FAKE_TIMER_ENV)
        path, flush = (Path(fake) if fake else None), None
    else:
        path, flush = cfg.fake_timer, cfg.l2_flush
    if path is not None:
        from pytest_convperf.measure.fake import FakeTimer

        return FakeTimer.from_file(path)
    if device_info.is_cuda:
        from pytest_convperf.measure.cuda import CudaTimer

        return CudaTimer(device_info, flush=flush)
    from pytest_convperf.measure.cpu import CpuTimer

    return CpuTimer(device_info)


class MeasureOne:
    """The ``convperf_measure_one`` fixture: ``(fn, *, mode="cold", **rule) -> Measurement``.

    Warm-up, then adaptive rounds until the 95 % CI of the median is within +-0.5 % (+-1 %
    under 10 us) or a cap. ``mode`` is ``cold`` (L2 flushed before each sample), ``warm``,
    ``graph`` (CUDA graph replay of K calls, for kernels under ~20 us) or ``auto`` (cold,
    switching to graph for short kernels). On a CPU every mode times with the CPU timer's clock:
    thread CPU time in a 1-thread session (``cpu-thread``), the wall clock with several (``cpu``).
    """

    def __init__(self, timer: Timer) -> None:
        self.timer = timer

    def __call__(self, fn: Callable[[], object], *, mode: str = "cold", **rule: Any) -> Measurement:
        from pytest_convperf.measure.rounds import measure_one
        from pytest_convperf.measure.rule import StopRule

        return measure_one(self.timer, fn, mode=mode, rule=StopRule.for_timer(self.timer, **rule))


def make_measure_one(device_info: DeviceInfo, timer: Timer | None = None) -> MeasureOne:
    """The object behind the ``convperf_measure_one`` fixture."""
    return MeasureOne(timer if timer is not None else make_timer(device_info))


__all__ = ["MeasureOne", "make_measure_one", "make_timer"]
