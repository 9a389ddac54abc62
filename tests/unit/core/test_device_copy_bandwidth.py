"""The CPU roofline floor is measured by the clock the CPU timer uses: on a loaded box the wall
clock under-measured the copy bandwidth 10x and made a correct candidate an ImplausibleTime."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from pytest_convperf.core import device as device_mod
from pytest_convperf.core.device import measure_copy_bandwidth, resolve_device


def test_one_thread_copy_bandwidth_uses_the_thread_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    thread = itertools.count(0, 1_000_000)  # 1 ms of CPU time per reading pair step
    wall = itertools.count(0, 1_000_000_000)  # 1 s of wall time: a preempted thread
    monkeypatch.setattr(device_mod.time, "thread_time_ns", lambda: next(thread))
    monkeypatch.setattr(device_mod.time, "perf_counter_ns", lambda: next(wall))
    info = resolve_device("cpu")
    assert info.threads == 1
    assert measure_copy_bandwidth(info) == pytest.approx(2 * 64 * 2**20 / 1e-3)
    two = replace(info, threads=2)  # several threads: the wall clock, like the timer
    assert measure_copy_bandwidth(two) == pytest.approx(2 * 64 * 2**20 / 1.0)
