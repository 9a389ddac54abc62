"""Peak memory of a block of code.

On a GPU the CUDA caching allocator's peak (``torch.cuda.max_memory_allocated``) after a reset
gives the most the block held at once; NVML adds the device-wide memory in use (which includes
the allocator's cache, cuDNN workspaces and other processes). On a CPU there is no allocator
peak to read, so the fallback is the process's resident set: Linux lets us reset the peak
(``/proc/self/clear_refs``), and ``VmHWM`` after the block minus ``VmRSS`` before it is the
block's growth. Where that reset is refused a 1 ms sampling thread estimates the peak instead.
Both CPU numbers are coarse (page granularity, other threads count too).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from pytest_convperf.measure.allocator import release_free_heap

if TYPE_CHECKING:
    from pytest_convperf.core.device import DeviceInfo


@dataclass
class MemoryUsage:
    """Filled when the block exits: ``peak_bytes`` (block's peak above its start), ``source``.

    ``source`` is ``cuda-allocator``, ``cpu-rss`` (exact peak of the resident set) or
    ``cpu-rss-sampled`` (sampled every millisecond). ``peak_total_bytes`` is the absolute peak;
    ``nvml_used_bytes`` the device memory in use per NVML at exit (None without NVML or on a CPU).
    """

    source: str
    peak_bytes: int = 0
    peak_total_bytes: int = 0
    start_bytes: int = 0
    nvml_used_bytes: int | None = None


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@contextmanager
def _cuda_usage(device: DeviceInfo) -> Iterator[MemoryUsage]:
    dev = torch.device(device.torch_device)
    torch.cuda.synchronize(dev)
    usage = MemoryUsage(source="cuda-allocator", start_bytes=torch.cuda.memory_allocated(dev))
    torch.cuda.reset_peak_memory_stats(dev)
    try:
        yield usage
    finally:
        torch.cuda.synchronize(dev)
        usage.peak_total_bytes = torch.cuda.max_memory_allocated(dev)
        usage.peak_bytes = max(0, usage.peak_total_bytes - usage.start_bytes)
        if device.nvml is not None:
            usage.nvml_used_bytes = device.nvml.memory_used_bytes()


@contextmanager
def _cpu_usage() -> Iterator[MemoryUsage]:
    release_free_heap()  # freed heap kept resident would hide the call's allocations from the RSS
    start = (_status_kib("VmRSS") or 0) * 1024
    if _reset_peak_rss() and _status_kib("VmHWM") is not None:
        usage = MemoryUsage(source="cpu-rss", start_bytes=start)
        try:
            yield usage
        finally:
            usage.peak_total_bytes = (_status_kib("VmHWM") or 0) * 1024
            usage.peak_bytes = max(0, usage.peak_total_bytes - start)
        return
    usage = MemoryUsage(source="cpu-rss-sampled", start_bytes=start)
    peak = [start]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.001):
            peak[0] = max(peak[0], (_status_kib("VmRSS") or 0) * 1024)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield usage
    finally:
        stop.set()
        thread.join()
        peak[0] = max(peak[0], (_status_kib("VmRSS") or 0) * 1024)
        usage.peak_total_bytes = peak[0]
        usage.peak_bytes = max(0, peak[0] - start)


#: The ``gpu_memory`` fixture's type: ``with gpu_memory() as mem: ...`` then ``mem.peak_bytes``.
TrackMemory = Callable[[], AbstractContextManager[MemoryUsage]]


def memory_tracker(device: DeviceInfo) -> AbstractContextManager[MemoryUsage]:
    """``with memory_tracker(device) as mem: ...`` then ``mem.peak_bytes`` (see :class:`MemoryUsage`)."""
    return _cuda_usage(device) if device.is_cuda else _cpu_usage()
