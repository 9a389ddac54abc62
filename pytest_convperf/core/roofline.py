"""Roofline floors of a problem: its minimum bytes at the measured copy bandwidth and at a known
GPU's datasheet peak (:data:`SPEC_PEAKS`). Every measured comparison passes :func:`sanity`, which
adds :func:`roofline_facts` to it; the reports show the candidate's share of each floor."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from pytest_convperf.core.device import DeviceInfo
    from pytest_convperf.core.problem import Conv2dProblem
    from pytest_convperf.core.results import Comparison


class ImplausibleTime(AssertionError):
    """A measured time below half the roofline floor: the kernel cannot have done its work."""


@dataclass(frozen=True)
class SpecPeak:
    """A GPU's datasheet HBM bandwidth, and how to recognise the GPU from its name and memory."""

    label: str
    bytes_per_s: float
    tokens: tuple[str, ...]  # all must appear in the slugified name
    exclude: tuple[str, ...] = ()  # none may appear (variants with another memory system)
    min_gib: float = 0.0  # total memory, to tell memory variants apart

    def matches(self, name: str, memory_bytes: int) -> bool:
        words = re.findall(r"[a-z0-9]+", name.lower())
        return (
            all(t in words for t in self.tokens)
            and not any(t in words for t in self.exclude)
            and memory_bytes >= self.min_gib * 2**30
        )


# NVIDIA datasheets (docs/design.md §17 quotes the H100's). The H100 PCIe
# (HBM2e, 2.0 TB/s), H100 NVL and the A100 40GB/PCIe differ in bandwidth and are left out: an
# unlisted GPU has no spec peak (None), never a guessed one.
SPEC_PEAKS = (
    SpecPeak("H100 SXM", 3.35e12, ("h100",), exclude=("pcie", "nvl"), min_gib=70),
    SpecPeak("H200", 4.8e12, ("h200",), min_gib=130),
    SpecPeak("A100 80GB", 2.0e12, ("a100",), exclude=("pcie",), min_gib=70),
)


def spec_peak(name: str, memory_bytes: int) -> SpecPeak | None:
    """The datasheet bandwidth of a known GPU (``torch.cuda`` name and total memory), else None."""
    return next((p for p in SPEC_PEAKS if p.matches(name, memory_bytes)), None)


class RooflineFacts(TypedDict):
    """A problem's roofline floors (:func:`roofline_facts`), added to its comparison's facts."""

    roofline_floor_us: float
    roofline_bandwidth_gbs: float
    roofline_spec_floor_us: float | None
    roofline_spec: str


def roofline_facts(min_bytes: int, device: DeviceInfo) -> RooflineFacts:
    """Roofline floors of a problem: at the measured copy bandwidth and at the GPU's spec peak.

    ``roofline_floor_us`` (measured copy bandwidth, what the sanity check uses),
    ``roofline_spec_floor_us`` (None when the GPU is not in :data:`SPEC_PEAKS`, or a CPU) and
    ``roofline_spec`` naming the peak used, or why there is none.
    """
    measured = device.copy_bandwidth()
    peak = spec_peak(device.name, int(device.facts.get("memory_bytes") or 0)) if device.is_cuda else None
    if peak is not None:
        spec = f"{peak.label} spec {peak.bytes_per_s / 1e12:.3g} TB/s"
    elif device.is_cuda:
        spec = f"no spec peak: {device.name!r} is not in the table of known GPUs"
    else:
        spec = "no spec peak on a CPU"
    return RooflineFacts(
        roofline_floor_us=min_bytes / measured * 1e6,
        roofline_bandwidth_gbs=measured / 1e9,
        roofline_spec_floor_us=min_bytes / peak.bytes_per_s * 1e6 if peak is not None else None,
        roofline_spec=spec,
    )


def sanity(comparison: Comparison, problem: Conv2dProblem, device: DeviceInfo) -> Comparison:
    """The comparison with its roofline floor as a fact; :class:`ImplausibleTime` under half of it."""
    bandwidth = device.copy_bandwidth()
    floor = problem.min_bytes / bandwidth
    for side, m in (("candidate", comparison.candidate), ("reference", comparison.reference)):
        if m.median < 0.5 * floor:
            raise ImplausibleTime(
                f"{side} median {m.median * 1e6:.3f} us on {problem.id} is under half the roofline floor "
                f"{floor * 1e6:.3f} us ({problem.min_bytes} bytes at the measured copy bandwidth "
                f"{bandwidth / 1e9:.1f} GB/s): the kernel did not do its work (did it launch, on the "
                "current stream, and write its whole output?)"
            )
    roofline = roofline_facts(problem.min_bytes, device)  # copy-BW and spec-peak floors
    return comparison.with_facts(roofline)
