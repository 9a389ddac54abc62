"""Result tables of the im2col+GEMM and PCILT suites (seed 002's and seed 003's columns).

Rows are collected by a module-scoped fixture of each suite and added as a Markdown section
(``convperf_report``) to the report directory when the module ends (and printed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pytest
import torch

from pytest_convperf import ReportSections, TrackMemory

MB = 1024 * 1024


@dataclass
class Table:
    """A Markdown table: a title, notes, a header and rows of cells."""

    title: str
    header: Sequence[str]
    notes: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"## {self.title}", "", *self.notes, ""] if self.notes else [f"## {self.title}", ""]
        out += ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return [*out, ""]


def goal_status(speedup: float | None, goal: float | None, *, measured: bool, why: str = "CPU") -> str:
    """The "goal met" cell next to a speedup goal (reported, never asserted): ``met``, ``not met``,
    ``not measured (CPU)`` where the goal's kernel did not run (``why`` says why), ``-`` without a goal."""
    if goal is None:
        return "-"
    if not measured or speedup is None or math.isnan(speedup):
        return f"not measured ({why})"
    return "met" if speedup >= goal else "not met"


def fmt(value: float | None, digits: int = 4) -> str:
    """A cell: ``-`` for missing, ``inf`` kept, else ``digits`` significant digits."""
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


def peak_mb(gpu_memory: TrackMemory, fn: Callable[[], object]) -> float:
    """Peak memory of one call in MiB (CUDA allocator on a GPU, coarse resident-set growth on a CPU)."""
    with gpu_memory() as mem:
        fn()
    return float(mem.peak_bytes) / MB


def table_fixture(
    name: str, heading: str, *tables: Table
) -> Callable[[pytest.FixtureRequest], Iterator[dict[str, Table]]]:
    """A module-scoped fixture yielding ``{title: Table}`` and writing them at module end."""

    @pytest.fixture(scope="module")
    def fixture(convperf_report: ReportSections) -> Iterator[dict[str, Table]]:
        fresh = {t.title: Table(t.title, t.header, list(t.notes)) for t in tables}
        yield fresh
        lines = [line for t in fresh.values() if t.rows for line in t.lines()]
        if lines:
            convperf_report.section(name, "\n".join(lines), title=heading)
            print(f"\n{chr(10).join(lines)}\nconvperf tables: {name} in the report directory")

    return fixture


def device_note(device: torch.device) -> str:
    """One line naming the device and the fp32 math mode."""
    if device.type == "cuda":
        return f"Device: {torch.cuda.get_device_name(device)}; fp32 with TF32 off on both sides (IEEE)."
    return (
        f"Device: CPU ({torch.get_num_threads()} threads); times are CPU times of the PyTorch-ops reference."
    )
