"""A stand-in for ``torch.cuda`` in the CUDA timer's logic tests (no GPU): events and ``_sleep``
append to a log; each event's elapsed time comes from a script (a constant or an iterator)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_convperf.core.clocks import ClockSample
from pytest_convperf.core.device import DeviceInfo
from pytest_convperf.measure import cuda as cuda_timing


class Recorder:
    def __init__(self, elapsed_ms: float | Iterator[float] = 0.25) -> None:
        self.log: list[str] = []
        self.elapsed_ms = elapsed_ms

    def event(self, enable_timing: bool = False) -> Any:
        rec = self

        class Event:
            def record(self) -> None:
                rec.log.append("record")

            def synchronize(self) -> None:
                rec.log.append("sync")

            def elapsed_time(self, other: object) -> float:
                script = rec.elapsed_ms
                return script if isinstance(script, float) else next(script)

        return Event()

    def sleep(self, cycles: int) -> None:
        self.log.append(f"sleep:{cycles}")


def stub_timer(
    monkeypatch: pytest.MonkeyPatch,
    rec: Recorder,
    *,
    torch_device: str = "cuda:0",
    l2_bytes: int = 2**20,
    **kw: Any,
) -> cuda_timing.CudaTimer:
    """A ``CudaTimer`` whose CUDA calls go to ``rec`` (NVML reports 1500 MHz)."""
    monkeypatch.setattr(cuda_timing, "_CUDA", SimpleNamespace(Event=rec.event, _sleep=rec.sleep))
    info = DeviceInfo(
        kind="cuda", torch_device=torch_device, name="stub", slug="stub", threads=1, l2_bytes=l2_bytes
    )
    info.nvml = SimpleNamespace(sample=lambda: ClockSample(sm_mhz=1500.0))  # type: ignore[assignment]
    return cuda_timing.CudaTimer(info, **kw)
