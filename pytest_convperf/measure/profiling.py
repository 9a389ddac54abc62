"""torch.profiler around a block: a Chrome/Perfetto JSON trace and a kernel table.

On a GPU the table lists CUDA kernels (device time), which is how the cuDNN kernel behind the
reference is named in reports; on a CPU it lists operators by self CPU time. Trace files go
under the report directory with a name made safe from the test id (``/``, ``::``, ``[``, ``]``
and anything else outside ``[A-Za-z0-9._-]`` become ``_``; long names keep a hash suffix).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import torch
from torch.profiler import ProfilerActivity, profile

from pytest_convperf.core.kerneldiff import KernelShare

if TYPE_CHECKING:
    from pytest_convperf.core.device import DeviceInfo

MAX_NAME = 150
# The stored kernel table keeps the rows that matter, so a baseline file stays readable.
MAX_ROWS = 12
MIN_SHARE = 0.01
KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"
KINETO_QUIET = "5"  # above ERROR (2): kineto then prints no log lines of its own


@dataclass(frozen=True)
class KernelRow:
    """One row of a kernel table: times in microseconds, ``share`` of the table's total (0..1)."""

    name: str
    calls: int
    total_us: float
    mean_us: float
    share: float


@dataclass
class Trace:
    """Result of a profiled block: ``path`` of the JSON trace and ``kernels`` (rows, largest first)."""

    path: Path
    device: str
    kernels: list[KernelRow] = field(default_factory=list)

    def table(self, limit: int = 10) -> str:
        """The top ``limit`` rows as aligned text."""
        unit = "device" if self.device == "cuda" else "self CPU"
        lines = [f"{'name':<60} {'calls':>6} {'total us':>10} {'mean us':>9} {'share':>6}  ({unit} time)"]
        for row in self.kernels[:limit]:
            lines.append(
                f"{row.name[:60]:<60} {row.calls:>6} {row.total_us:>10.1f} {row.mean_us:>9.2f} "
                f"{row.share:>6.1%}"
            )
        return "\n".join(lines)


def safe_name(text: str) -> str:
    """A file-name-safe version of ``text`` (test ids contain ``/``, ``::``, brackets)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "trace"
    if len(name) > MAX_NAME:
        digest = hashlib.sha1(text.encode()).hexdigest()[:10]
        name = f"{name[: MAX_NAME - 11]}-{digest}"
    return name


def kernel_rows(prof: profile, cuda: bool) -> list[KernelRow]:
    """Aggregate a finished profile: CUDA kernels by device time, or CPU ops by self time."""
    rows: list[tuple[str, int, float]] = []
    for event in prof.key_averages():
        is_device = str(getattr(event, "device_type", "")).endswith("CUDA")
        if cuda:
            if not is_device:
                continue
            total = float(
                getattr(event, "self_device_time_total", 0.0) or getattr(event, "device_time_total", 0.0)
            )
        else:
            if is_device:
                continue
            total = float(event.self_cpu_time_total)
        if total > 0:
            rows.append((event.key, int(event.count), total))
    grand = sum(r[2] for r in rows) or 1.0
    rows.sort(key=lambda r: r[2], reverse=True)
    return [
        KernelRow(name, calls, total, total / max(calls, 1), total / grand) for name, calls, total in rows
    ]


def _activities(device: DeviceInfo) -> list[ProfilerActivity]:
    """CPU, plus CUDA on a GPU. On a CPU-only machine the profiler's library (kineto) still probes for
    GPUs and logs ``gpuGetDeviceCount failed with code 35`` as an ERROR; its log level (read when
    the profiler first starts in the process) silences that, unless the user set one."""
    if device.is_cuda:
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    if not torch.cuda.is_available():
        os.environ.setdefault(KINETO_LOG_LEVEL, KINETO_QUIET)
    return [ProfilerActivity.CPU]


@contextmanager
def _profiled(path: Path, device: DeviceInfo) -> Iterator[Trace]:
    activities = _activities(device)
    trace = Trace(path=path, device=device.kind)
    with profile(activities=activities, record_shapes=True) as prof:
        yield trace
        if device.is_cuda:
            torch.cuda.synchronize()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    trace.kernels = kernel_rows(prof, device.is_cuda)


#: The ``profiler_trace`` fixture's type: ``with profiler_trace("name") as tr: ...``.
StartTrace = Callable[[str], AbstractContextManager[Trace]]


def trace_factory(trace_dir: Path, nodeid: str, device: DeviceInfo) -> StartTrace:
    """The ``profiler_trace`` fixture: ``name -> context manager`` yielding a :class:`Trace`.

    Each call writes ``<trace_dir>/<safe test id>-<safe name>.json``; a repeated name in the
    same test gets ``-2``, ``-3``... so no trace overwrites another.
    """
    used: dict[str, int] = {}

    def start(name: str = "trace") -> AbstractContextManager[Trace]:
        base = safe_name(f"{nodeid}-{name}")
        used[base] = used.get(base, 0) + 1
        stem = base if used[base] == 1 else f"{base}-{used[base]}"
        return _profiled(Path(trace_dir) / f"{stem}.json", device)

    return start


def profile_kernels(fn: Callable[[], object], device: DeviceInfo, calls: int = 3) -> list[KernelRow]:
    """Kernel table of ``calls`` calls of ``fn`` (no trace file): what ran, and for how long."""
    activities = _activities(device)
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        if device.is_cuda:
            torch.cuda.synchronize()
    return kernel_rows(prof, device.is_cuda)


def kernel_table(rows: Iterable[KernelRow], calls: int) -> list[KernelShare]:
    """The table a baseline entry stores, ``[{name, calls, share}]`` (``core.kerneldiff`` reads it
    back and says what moved), from the profiler rows of ``calls`` candidate calls: ``calls`` per
    candidate call, ``share`` of the time, only rows of at least ``MIN_SHARE``, at most ``MAX_ROWS``."""
    out = [
        KernelShare(name=row.name, calls=round(row.calls / calls, 3), share=round(row.share, 3))
        for row in rows
        if row.share >= MIN_SHARE
    ]
    out.sort(key=lambda r: -r["share"])
    return out[:MAX_ROWS]


def candidate_kernels(fn: Callable[[], object], device: DeviceInfo, calls: int = 3) -> list[KernelShare]:
    """The kernel table a baseline entry stores (:func:`kernel_table`) of ``calls`` calls of ``fn``."""
    fn()  # warm: a first call's autotuning or lazy compilation is not the kernel table
    return kernel_table(profile_kernels(fn, device, calls=calls), calls)


class ProfileFacts(TypedDict, total=False):
    """What :func:`profile_facts` adds to a comparison's ``facts`` (a mapping: it is merged there)."""

    kernels: list[KernelShare]
    traces: list[str]


def profile_facts(
    kernel_call: Callable[[], object] | None,
    traced: Sequence[tuple[str, Callable[[], object]]],
    device: DeviceInfo,
    settings: Callable[[], AbstractContextManager[object]],
    *,
    trace_dir: Path | None,
    nodeid: str,
    label: str,
) -> ProfileFacts:
    """After a check's timing, under its perf ``settings``: the candidate's kernel table of
    ``kernel_call`` (the entry stores it, a FAIL names what moved) and, with ``trace_dir``
    (--convperf-trace), the paths of a profiler trace of one call of each ``traced`` side, each
    after one untraced call; each traced call is a region named ``<label>-<side>``."""
    facts = ProfileFacts()
    with settings():
        if kernel_call is not None:
            facts["kernels"] = candidate_kernels(kernel_call, device)
        if trace_dir is not None:
            start = trace_factory(trace_dir, nodeid, device)
            paths = []
            for name, call in traced:
                call()
                # The traced call is a region named after its side, so a trace viewer says which is which.
                with start(f"{label}-{name}") as trace, torch.profiler.record_function(name):
                    call()
                paths.append(str(trace.path))
            facts["traces"] = paths
    return facts
