"""The device in use: torch device, machine slug, facts for reports, NVML clock sampling.

The slug keys the baseline folder, so it is built from what determines speed (GPU name and
memory size; CPU model and thread count) and never from the hostname. NVML is optional: a
missing library, a container without the driver's NVML, or any NVML error degrades to
"clocks unknown" and never fails a test. Clocks are read, never set.
"""

from __future__ import annotations

import math
import platform
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_convperf.core.clocks import ClockSample
from pytest_convperf.core.environment import CPU_THREADS_ENV, env_value, parse_cpu_threads
from pytest_convperf.core.slugs import slugify

# One value of ``DeviceInfo.facts``: versions and names are strings (``cuda`` None on a CPU build),
# hardware numbers int or float, ``cudnn`` an int or None, ``clocks`` how clocks are read (or why not).
DeviceFact = str | int | float | None


class NvmlSampler:
    """Reads clocks of one GPU through nvidia-ml-py; ``sample()`` returns None once NVML fails."""

    def __init__(self, handle: Any, nvml: Any) -> None:
        self._handle = handle
        self._nvml = nvml
        self.error: str | None = None
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = reasons or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)

    def sample(self) -> ClockSample | None:
        if self.error is not None:
            return None
        nvml = self._nvml
        try:
            sm = float(nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM))
        except Exception as exc:  # any NVML failure means "clocks unknown", never a crash
            self.error = f"NVML clock read failed: {exc}"
            return None
        reasons: int | None = None  # unknown unless NVML reports them
        temp = power = None
        try:
            reasons = int(self._reasons(self._handle)) if self._reasons is not None else None
        except Exception:
            reasons = None
        try:
            temp = float(nvml.nvmlDeviceGetTemperature(self._handle, nvml.NVML_TEMPERATURE_GPU))
        except Exception:
            temp = None
        try:
            power = nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
        except Exception:
            power = None
        return ClockSample(sm_mhz=sm, reasons=reasons, temp_c=temp, power_w=power)

    def memory_used_bytes(self) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        except Exception:
            return None

    def static_facts(self) -> dict[str, DeviceFact]:
        nvml = self._nvml
        facts: dict[str, DeviceFact] = {}
        for key, call in (
            ("driver", lambda: nvml.nvmlSystemGetDriverVersion()),
            ("max_sm_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(self._handle, nvml.NVML_CLOCK_SM)),
            ("max_mem_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(self._handle, nvml.NVML_CLOCK_MEM)),
            ("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1000.0),
        ):
            try:
                value = call()  # type: ignore[no-untyped-call]
                facts[key] = value.decode() if isinstance(value, bytes) else value
            except Exception:
                continue
        return facts


def _open_nvml(index: int) -> tuple[NvmlSampler | None, str | None]:
    """NVML handle for torch's CUDA device ``index`` (matched by UUID, then PCI bus id)."""
    try:
        import pynvml
    except ImportError:
        return None, "clocks unknown: nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return None, f"clocks unknown: NVML init failed ({exc})"
    props = torch.cuda.get_device_properties(index)
    handle = None
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(
                text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
            )
        except Exception:
            handle = None
    if handle is None and hasattr(props, "pci_bus_id"):
        bus = (
            f"{getattr(props, 'pci_domain_id', 0):08x}:{props.pci_bus_id:02x}:"
            f"{getattr(props, 'pci_device_id', 0):02x}.0"
        )
        try:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
        except Exception:
            handle = None
    if handle is None:
        # Last resort, only when there is no ambiguity: one GPU in the machine.
        try:
            if pynvml.nvmlDeviceGetCount() == 1:
                handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            handle = None
    if handle is None:
        return None, "clocks unknown: could not match the CUDA device to an NVML device"
    return NvmlSampler(handle, pynvml), None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def cpu_slug(threads: int) -> str:
    """``<cpu model>-<threads>t``, e.g. ``intel-r-xeon-r-processor-2t``."""
    return f"{slugify(_cpu_model())}-{threads}t"


def gpu_slug(name: str, total_memory: int) -> str:
    """GPU name plus memory size unless the name already states it (``nvidia-h100-80gb-hbm3``)."""
    slug = slugify(name)
    if not re.search(r"\d+gb", slug):
        slug += f"-{round(total_memory / 2**30)}gb"
    return slug


def _versions(*, cuda: bool) -> dict[str, DeviceFact]:
    """torch and Python; on a CUDA device also the CUDA and cuDNN versions. A CPU measurement uses
    neither, so a CPU device does not name them: they would show as the CPU run's environment in its
    baseline entries, update notes and reports (issue 38.8: "cuda 13.0, cudnn 92400" on a CPU)."""
    facts: dict[str, DeviceFact] = {
        "torch": torch.__version__.split("+")[0],
        "python": platform.python_version(),
    }
    if not cuda:
        return facts
    facts["cuda"] = torch.version.cuda
    try:
        cudnn: Any = torch.backends.cudnn
        facts["cudnn"] = cudnn.version() if cudnn.is_available() else None
    except Exception:
        facts["cudnn"] = None
    return facts


@dataclass
class DeviceInfo:
    """The device in use and its fingerprint.

    ``torch_device`` is ``cuda:N`` or ``cpu``; ``slug`` keys baselines; ``facts`` holds versions
    and hardware numbers for reports. ``nvml`` samples clocks on a GPU (None: clocks unknown,
    the reason is in ``facts["clocks"]``). ``lost`` is set once a sticky CUDA error was seen.
    """

    kind: str
    torch_device: str
    name: str
    slug: str
    threads: int
    facts: dict[str, DeviceFact] = field(default_factory=dict)
    l2_bytes: int = 0
    nvml: NvmlSampler | None = None
    lost: str | None = None
    _bandwidth: float | None = None

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def copy_bandwidth(self) -> float:
        """Bytes per second of a large device copy (read + write), measured once per session."""
        if self._bandwidth is None:
            self._bandwidth = measure_copy_bandwidth(self)
            self.facts["copy_bandwidth_gbs"] = round(self._bandwidth / 1e9, 1)
        return self._bandwidth

    def sample_clocks(self) -> ClockSample | None:
        return self.nvml.sample() if self.nvml is not None else None

    def mark_lost(self, where: str, message: str) -> None:
        """Remember a lost CUDA context; later CUDA tests skip with one shared reason."""
        if self.lost is None:
            self.lost = f"the CUDA context was lost in {where} ({message.splitlines()[0][:200]})"

    def ensure_usable(self) -> None:
        """Skip the calling test when an earlier test lost the CUDA context of this process."""
        if self.lost is not None:
            pytest.skip(f"{self.lost}; CUDA tests after it cannot run in this process: fix that test first")


def measure_copy_bandwidth(device: DeviceInfo) -> float:
    """Best-of-5 copy of a buffer of 4 x L2 (GPU, at least 256 MiB) or 64 MiB (CPU); bytes/s.

    A copy reads and writes every byte, so bandwidth counts both. On a CPU the copy runs with
    the session's thread count, like the timings it bounds.
    """
    if device.is_cuda:
        nbytes = max(256 * 2**20, 4 * device.l2_bytes)
        dev = torch.device(device.torch_device)
        src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).fill_(1.0)
        dst = torch.empty_like(src)
        dst.copy_(src)
        best = math.inf
        cuda: Any = torch.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        for _ in range(5):
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) * 1e-3)
        del src, dst
        return 2.0 * nbytes / best
    nbytes = 64 * 2**20
    src_cpu = torch.ones(nbytes // 4, dtype=torch.float32)
    dst_cpu = torch.empty_like(src_cpu)
    dst_cpu.copy_(src_cpu)
    best = math.inf
    saved = torch.get_num_threads()
    torch.set_num_threads(device.threads)
    # The CPU timer's clock (timing.cpu): thread CPU time at 1 thread, which a loaded box does not
    # inflate; measured by the wall clock there, the floor rose 10x and failed correct candidates.
    clock = time.thread_time_ns if device.threads == 1 else time.perf_counter_ns
    try:
        for _ in range(5):
            t0 = clock()
            dst_cpu.copy_(src_cpu)
            best = min(best, (clock() - t0) * 1e-9)
    finally:
        torch.set_num_threads(saved)
    return 2.0 * nbytes / best


def cpu_threads(raw: str | None = None) -> int:
    """Threads the CPU timer pins: ``raw`` (the session's ``ConvperfConfig.cpu_threads``), else
    ``$CONVPERF_CPU_THREADS``, else 1.

    One thread by default because it is what reproduces: on a shared or oversubscribed machine
    an OpenMP pool waits for a descheduled peer at every barrier, and a 150 us conv then reads
    60 ms now and then (seen on a loaded 2-core box). The count is part of the machine slug.
    """
    return parse_cpu_threads(raw if raw is not None else env_value(CPU_THREADS_ENV))


def cuda_missing() -> str | None:
    """Why ``--convperf-device=cuda`` cannot run here (one line with the fix), or None when CUDA is usable.

    The plugin makes it a usage error at configure time, as an unknown device is, instead of letting
    every check fail on it (issue 38.6)."""
    if torch.cuda.is_available():
        return None
    return (
        "--convperf-device=cuda but torch.cuda.is_available() is False "
        f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
        "run on a machine with a GPU or use --convperf-device=cpu (or auto)"
    )


def resolve_device(pref: str = "auto", *, threads: int | None = None) -> DeviceInfo:
    """Build the device fingerprint for ``--convperf-device`` (auto: CUDA when available).

    ``threads``: the CPU timer's thread count (the plugin passes ``ConvperfConfig.cpu_threads``);
    None reads ``$CONVPERF_CPU_THREADS`` (:func:`cpu_threads`), for use outside pytest.

    ``cuda`` without a usable GPU raises a RuntimeError that says how to fix it.
    """
    if pref not in ("auto", "cuda", "cpu"):
        raise ValueError(f"device preference {pref!r} must be auto, cuda or cpu")
    use_cuda = pref == "cuda" or (pref == "auto" and torch.cuda.is_available())
    missing = cuda_missing() if use_cuda else None
    if missing is not None:
        raise RuntimeError(missing)
    facts = _versions(cuda=use_cuda)
    if use_cuda:
        threads = torch.get_num_threads()
    elif threads is None:
        threads = cpu_threads()
    if use_cuda:
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        facts.update(
            gpu=props.name,
            memory_bytes=int(props.total_memory),
            sm_count=int(props.multi_processor_count),
            l2_bytes=l2,
            capability=f"{props.major}.{props.minor}",
        )
        nvml, reason = _open_nvml(index)
        if nvml is not None:
            facts.update(nvml.static_facts())
            facts["clocks"] = "nvml"
        else:
            facts["clocks"] = reason
        return DeviceInfo(
            kind="cuda",
            torch_device=f"cuda:{index}",
            name=props.name,
            slug=gpu_slug(props.name, props.total_memory),
            threads=threads,
            facts=facts,
            l2_bytes=l2,
            nvml=nvml,
        )
    model = _cpu_model()
    facts.update(cpu=model, threads=threads, clocks="n/a (cpu)")
    return DeviceInfo(
        kind="cpu", torch_device="cpu", name=model, slug=cpu_slug(threads), threads=threads, facts=facts
    )


# Messages of CUDA errors after which the context cannot be used again (sticky errors).
_STICKY = (
    "illegal memory access",
    "unspecified launch failure",
    "device-side assert",
    "illegal instruction",
    "misaligned address",
    "an illegal",
    "uncorrectable ecc",
    "context is destroyed",
    "device kernel image is invalid",
    "hardware stack error",
    "launch timed out",
)


def is_sticky_cuda_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a CUDA error that leaves the context unusable."""
    text = str(exc).lower()
    return ("cuda" in text or "acceleratorerror" in type(exc).__name__.lower()) and any(
        key in text for key in _STICKY
    )
