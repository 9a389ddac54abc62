"""Device fingerprint, NVML degradation, sticky CUDA errors, memory and trace helpers (CPU)."""

from __future__ import annotations

import socket
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pytest_convperf.core import device as dev
from pytest_convperf.core.clocks import ClockSample, reason_names
from pytest_convperf.core.environment import CPU_THREADS_ENV
from pytest_convperf.core.slugs import slugify
from pytest_convperf.measure.memory import memory_tracker
from pytest_convperf.measure.profiling import safe_name


@pytest.mark.parametrize(
    ("name", "memory", "slug"),
    [
        ("NVIDIA H100 80GB HBM3", 80 * 2**30, "nvidia-h100-80gb-hbm3"),
        ("NVIDIA A100-SXM4-40GB", 40 * 2**30, "nvidia-a100-sxm4-40gb"),
        ("NVIDIA GeForce RTX 4090", 24 * 2**30, "nvidia-geforce-rtx-4090-24gb"),
        ("NVIDIA H200", 141 * 10**9, "nvidia-h200-131gb"),
    ],
)
def test_gpu_slug(name: str, memory: int, slug: str) -> None:
    assert dev.gpu_slug(name, memory) == slug


def test_cpu_device_fingerprint_has_versions_threads_and_no_hostname(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CPU_THREADS_ENV, raising=False)
    info = dev.resolve_device("cpu")
    assert info.kind == "cpu" and info.torch_device == "cpu" and not info.is_cuda
    assert info.threads == 1 and info.slug.endswith("-1t")
    assert info.slug == slugify(info.slug)
    host = slugify(socket.gethostname())
    if len(host) > 3:
        assert host not in info.slug
    for key in ("torch", "cpu", "threads", "clocks"):
        assert key in info.facts
    # The torch build's CUDA and cuDNN versions are not the CPU measurement's environment (issue 38.8).
    assert "cuda" not in info.facts and "cudnn" not in info.facts
    assert info.facts["torch"] == torch.__version__.split("+")[0]
    assert info.sample_clocks() is None


def test_cpu_thread_count_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_THREADS_ENV, "3")
    info = dev.resolve_device("cpu")
    assert info.threads == 3 and info.slug.endswith("-3t")
    monkeypatch.setenv(CPU_THREADS_ENV, "zero")
    with pytest.raises(ValueError, match="CONVPERF_CPU_THREADS='zero' must be a positive integer"):
        dev.resolve_device("cpu")


def test_copy_bandwidth_is_measured_once_and_plausible() -> None:
    info = dev.resolve_device("cpu")
    bw = info.copy_bandwidth()
    assert 1e8 < bw < 1e12  # 0.1 GB/s .. 1 TB/s: any real machine
    assert info.copy_bandwidth() == bw
    assert info.facts["copy_bandwidth_gbs"] == round(bw / 1e9, 1)


def test_forcing_cuda_without_a_gpu_says_how_to_fix_it() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="use --convperf-device=cpu"):
        dev.resolve_device("cuda")
    with pytest.raises(ValueError, match="must be auto, cuda or cpu"):
        dev.resolve_device("gpu")


def test_auto_picks_cpu_without_cuda() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert dev.resolve_device("auto").kind == expected


# ---- NVML degrades to "clocks unknown" ----


def test_missing_nvml_library_means_clocks_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    sampler, reason = dev._open_nvml(0)
    assert sampler is None
    assert reason is not None and reason.startswith("clocks unknown") and "not installed" in reason


def test_broken_nvml_init_means_clocks_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(nvmlInit=fail))
    sampler, reason = dev._open_nvml(0)
    assert sampler is None
    assert reason == "clocks unknown: NVML init failed (NVML Shared Library Not Found)"


class _FakeNvml:
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self) -> None:
        self.broken: set[str] = set()

    def _maybe(self, name: str, value: Any) -> Any:
        if name in self.broken:
            raise RuntimeError(f"{name} not supported")
        return value

    def nvmlDeviceGetClockInfo(self, handle: object, kind: int) -> int:
        return int(self._maybe("clock", 1980))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        return int(self._maybe("reasons", 0x4 | 0x40))

    def nvmlDeviceGetTemperature(self, handle: object, kind: int) -> int:
        return int(self._maybe("temp", 61))

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        return int(self._maybe("power", 350_000))

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> Any:
        return SimpleNamespace(used=self._maybe("memory", 12345))


def test_nvml_sampler_reads_and_degrades_field_by_field() -> None:
    nvml = _FakeNvml()
    sampler = dev.NvmlSampler(object(), nvml)
    sample = sampler.sample()
    assert sample == ClockSample(sm_mhz=1980.0, reasons=0x44, temp_c=61.0, power_w=350.0)
    assert sample.hw_slowdown
    assert sample.to_dict()["reasons"] == ["sw_power_cap", "hw_thermal"]
    assert sampler.memory_used_bytes() == 12345
    nvml.broken = {"temp", "power", "memory"}
    partial = sampler.sample()
    assert partial is not None and partial.temp_c is None and partial.power_w is None
    assert sampler.memory_used_bytes() is None
    nvml.broken = {"clock"}
    assert sampler.sample() is None
    assert sampler.error is not None and "clock read failed" in sampler.error
    nvml.broken = set()
    assert sampler.sample() is None  # stays "clocks unknown" for the rest of the session


def test_a_failed_throttle_reason_read_is_unknown_not_clean() -> None:
    nvml = _FakeNvml()
    nvml.broken = {"reasons"}
    sample = dev.NvmlSampler(object(), nvml).sample()
    assert sample is not None and sample.sm_mhz == 1980.0
    assert sample.reasons is None and not sample.hw_slowdown
    assert sample.to_dict()["reasons"] is None


def test_reason_names() -> None:
    assert reason_names(0) == []
    assert reason_names(0x8 | 0x80) == ["hw_slowdown", "hw_power_brake"]


# ---- lost CUDA context ----


@pytest.mark.parametrize(
    ("message", "sticky"),
    [
        ("CUDA error: an illegal memory access was encountered", True),
        ("CUDA error: unspecified launch failure", True),
        ("CUDA error: device-side assert triggered", True),
        ("CUDA out of memory. Tried to allocate 2.00 GiB", False),
        ("expected scalar type Float but found Half", False),
    ],
)
def test_sticky_cuda_errors(message: str, sticky: bool) -> None:
    assert dev.is_sticky_cuda_error(RuntimeError(message)) is sticky


def test_lost_context_skips_later_tests_with_one_reason() -> None:
    info = dev.DeviceInfo(kind="cuda", torch_device="cuda:0", name="x", slug="x", threads=1)
    info.ensure_usable()
    info.mark_lost("tests/test_a.py::test_one", "CUDA error: an illegal memory access was encountered\nmore")
    info.mark_lost("tests/test_a.py::test_two", "a later error does not replace the first")
    with pytest.raises(
        pytest.skip.Exception, match=r"lost in tests/test_a.py::test_one \(CUDA error: an illegal"
    ):
        info.ensure_usable()


# ---- memory and trace names ----


def test_cpu_memory_tracker_sees_a_large_allocation() -> None:
    info = dev.resolve_device("cpu")
    with memory_tracker(info) as mem:
        block = torch.ones(16 * 2**20)  # 64 MiB, touched
        del block
    assert mem.source.startswith("cpu-rss")
    assert mem.peak_bytes >= 48 * 2**20
    assert mem.peak_total_bytes >= mem.peak_bytes
    assert mem.nvml_used_bytes is None


def test_safe_trace_names() -> None:
    assert (
        safe_name("tests/test_x.py::test_conv[n1-ci3/k3x3]-fwd")
        == "tests_test_x.py_test_conv_n1-ci3_k3x3_-fwd"
    )
    long = safe_name("a" * 400)
    assert len(long) == 150 and long != safe_name("a" * 401)
    assert safe_name("::") == "trace"


def test_cpu_memory_tracker_sees_an_allocation_reusing_freed_heap() -> None:
    """The timer's allocator settings keep freed heap resident (trim threshold 1 GiB); an
    allocation served from it grows no RSS, so the tracker trims the free heap first."""
    from pytest_convperf.measure.allocator import fix_allocator

    fix_allocator()
    blocks = [torch.ones(4 * 2**20) for _ in range(8)]  # 8 x 16 MiB, under the mmap threshold: heap
    del blocks  # 128 MiB free at the heap's top, kept resident
    with memory_tracker(dev.resolve_device("cpu")) as mem:
        block = torch.ones(16 * 2**20)  # 64 MiB, touched
        del block
    assert mem.peak_bytes >= 48 * 2**20, mem
