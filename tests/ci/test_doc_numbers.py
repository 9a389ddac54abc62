"""Numbers the docs quote are the numbers the code uses (issue 15: the CPU noise floor; issue 18:
the fresh processes of a confirm)."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_convperf.judge.verdict import CPU_NOISE_FLOOR, GPU_NOISE_FLOOR
from pytest_convperf.night.fresh_confirm import FRESH_PROCESSES

REPO = Path(__file__).resolve().parents[2]


def test_architecture_quotes_the_noise_floors_in_use() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    cpu = re.search(r"CPU `verdict\.CPU_NOISE_FLOOR` \(([\d.]+) %", text)
    gpu = re.search(r"Noise floors:\s+GPU ([\d.]+) %", text)
    assert cpu and gpu, "docs/architecture.md no longer names the noise floors where this test looks"
    assert float(cpu.group(1)) / 100 == CPU_NOISE_FLOOR
    assert float(gpu.group(1)) / 100 == GPU_NOISE_FLOOR


def test_the_docs_quote_the_fresh_processes_in_use() -> None:
    stats = (REPO / "docs" / "statistics.md").read_text()
    readme = (REPO / "README.md").read_text()
    found = re.search(r"in \*\*(\d+) fresh pytest processes\*\*", stats)
    again = re.search(r"end in (\d+) fresh pytest processes", readme)
    assert found and again, "statistics.md or README.md no longer quote the fresh processes here"
    assert int(found.group(1)) == int(again.group(1)) == FRESH_PROCESSES


def test_every_file_quotes_the_same_oldest_torch() -> None:
    """constraints.txt said ">= 2.4" while pyproject.toml and README said ">= 2.11" (issue 24.4)."""
    pyproject = (REPO / "pyproject.toml").read_text()
    found = re.search(r'"torch>=([\d.]+)"', pyproject)
    assert found, "pyproject.toml no longer pins torch>= where this test looks"
    oldest = found.group(1)
    for name in ("constraints.txt", "README.md"):
        quoted = set(re.findall(r"torch[^\n]*?>= ?([\d.]+)", (REPO / name).read_text()))
        assert quoted <= {oldest}, f"{name} quotes torch >= {sorted(quoted)}, pyproject.toml >= {oldest}"
    assert f">= {oldest}" in (REPO / "constraints.txt").read_text()
