"""% of roofline against the measured copy bandwidth and against a known GPU's datasheet peak.

The GPU names are those ``torch.cuda.get_device_properties().name`` reports; the copy bandwidth
is preset (measuring it on a GPU is covered by tests/test_cuda_timing.py on a GPU runner).
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_convperf.core.device import DeviceInfo
from pytest_convperf.core.roofline import roofline_facts, spec_peak
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.reports.report import markdown, terminal_lines
from pytest_convperf.reports.report_row import ReportRow
from tests.rows import check_row

GIB = 2**30


@pytest.mark.parametrize(
    ("name", "gib", "label", "tbps"),
    [
        ("NVIDIA H100 80GB HBM3", 79.6, "H100 SXM", 3.35),
        ("NVIDIA H200", 140.4, "H200", 4.8),
        ("NVIDIA A100-SXM4-80GB", 79.2, "A100 80GB", 2.0),
        ("NVIDIA H100 PCIe", 79.6, None, None),  # HBM2e, 2.0 TB/s: not the SXM part
        ("NVIDIA H100 NVL", 93.1, None, None),
        ("NVIDIA A100-SXM4-40GB", 39.4, None, None),  # 1.56 TB/s: the memory tells them apart
        ("NVIDIA A100 80GB PCIe", 79.2, None, None),
        ("NVIDIA GeForce RTX 4090", 23.6, None, None),
    ],
)
def test_spec_peak_matches_known_gpus_by_name_and_memory_only(
    name: str, gib: float, label: str | None, tbps: float | None
) -> None:
    peak = spec_peak(name, int(gib * GIB))
    if label is None:
        assert peak is None
    else:
        assert peak is not None and peak.label == label and peak.bytes_per_s == pytest.approx(tbps * 1e12)


def _device(kind: str, name: str, gib: float, copy_bps: float) -> DeviceInfo:
    info = DeviceInfo(
        kind=kind,
        torch_device="cuda:0" if kind == "cuda" else "cpu",
        name=name,
        slug="stub",
        threads=1,
        facts={"memory_bytes": int(gib * GIB)} if kind == "cuda" else {},
    )
    info._bandwidth = copy_bps  # measured once per session; preset here
    return info


def test_roofline_facts_give_both_floors_and_name_the_spec() -> None:
    facts = roofline_facts(3_350_000, _device("cuda", "NVIDIA H100 80GB HBM3", 79.6, 2.68e12))
    assert facts["roofline_floor_us"] == pytest.approx(1.25)  # 3.35 MB at 2.68 TB/s measured
    assert facts["roofline_spec_floor_us"] == pytest.approx(1.0)  # at the 3.35 TB/s spec
    assert facts["roofline_spec"] == "H100 SXM spec 3.35 TB/s"
    assert facts["roofline_bandwidth_gbs"] == pytest.approx(2680.0)


def test_an_unknown_gpu_or_a_cpu_has_no_spec_floor_and_says_so() -> None:
    gpu = roofline_facts(1000, _device("cuda", "NVIDIA L4", 22.0, 2.5e11))
    assert gpu["roofline_spec_floor_us"] is None
    assert gpu["roofline_spec"] == "no spec peak: 'NVIDIA L4' is not in the table of known GPUs"
    cpu = roofline_facts(1000, _device("cpu", "Some CPU", 0, 1e10))
    assert cpu["roofline_spec_floor_us"] is None and cpu["roofline_spec"] == "no spec peak on a CPU"
    assert cpu["roofline_floor_us"] == pytest.approx(0.1)


def _row(cand_us: float, facts: dict[str, Any]) -> CheckRow:
    def meas(us: float) -> dict[str, Any]:
        return {"median": us * 1e-6, "samples": [us * 1e-6], "ci": [us * 1e-6] * 2, "n": 1}

    return check_row(
        {
            "key": "test_x@p",
            "module": "test_m",
            "nodeid": "test_m.py::test_x",
            "verdict": "PASS",
            "message": "PASS: ok",
            "comparison": {
                "candidate": meas(cand_us),
                "reference": meas(2 * cand_us),
                "time_ratio": 0.5,
                "time_ratio_ci": [0.49, 0.51],
                "n_rounds": 21,
                "facts": facts,
            },
            "decision": {"verdict": "PASS"},
        }
    )


def test_report_and_terminal_show_both_percentages_and_say_which_is_which() -> None:
    facts = roofline_facts(3_350_000, _device("cuda", "NVIDIA H100 80GB HBM3", 79.6, 2.68e12))
    row = _row(2.0, facts)  # floors 1.25 us (copy BW) and 1.0 us (spec) against 2 us
    r = ReportRow.from_row(row)
    assert r.roofline == pytest.approx(0.625) and r.roofline_spec == pytest.approx(0.5)
    lines = terminal_lines([row])
    note = next(line for line in lines if line.startswith("roofline:"))
    assert "measured device copy bandwidth (copy BW)" in note and "(spec: H100 SXM spec 3.35 TB/s)" in note
    assert any("roofline 62% of copy BW, 50% of spec peak" in line for line in lines)
    md = markdown([row])
    assert "| MDE | roofline (copy BW) | roofline (spec) | note |" in md and "| - | 62% | 50% |" in md


def test_without_a_spec_peak_the_report_says_unknown() -> None:
    facts = roofline_facts(1_000_000, _device("cuda", "NVIDIA L4", 22.0, 2.5e11))
    row = _row(8.0, facts)  # floor 4 us at 250 GB/s
    lines = terminal_lines([row])
    assert any("roofline 50% of copy BW, spec unknown" in line for line in lines)
    assert any("'NVIDIA L4' is not in the table of known GPUs" in line for line in lines)
    # Rows without roofline facts (older rows, measure-only flows) add no note and no numbers.
    bare = terminal_lines([_row(8.0, {})])
    assert not any("roofline" in line for line in bare)
