"""kernels.sweep: the plan of every family (dry run, no CUDA), the CSV's schema from a CPU run of
synthetic cases with their anchors, and the clear stop without a GPU."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernels import sweep
from kernels.sweep_calls import PHASES, conv_case
from kernels.sweep_case import Case
from pytest_convperf.core.problem import Conv2dProblem

TINY = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=(3, 3), padding=(1, 1), groups=4)


def test_dry_run_lists_every_family_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep.main(["all", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for family in sweep.kernel_families():
        assert f"\n{family} " in out
    assert "nothing measured" in out


def test_every_family_plan_is_well_formed() -> None:
    planned = sweep.plan(sweep.kernel_families())
    assert set(planned) == {"depthwise", "edsr", "im2col_gemm", "pcilt"}
    for family, rows in planned.items():
        keys = [(r.case.variant, r.case.problem_id, r.case.phase) for r in rows]
        assert len(keys) == len(set(keys)), f"{family}: a row is planned twice"
        cases = [r.case for r in rows if r.reference is not None]
        assert cases, f"{family}: no variant rows"
        planned_keys = {(r.case.problem_id, r.case.variant, r.case.phase) for r in rows}
        for case in cases:
            assert case.family == family and case.phase in PHASES and case.bytes_moved > 0
            Conv2dProblem.from_id(case.problem_id)  # a valid id
            anchor = sweep.anchor_name(*sweep._dtype_layout(case))
            assert (case.problem_id, anchor, case.phase) in planned_keys, f"{case.variant}: no {anchor}"
    # Both depthwise kernels where the switch changes the kernel; both weight grads (w1, w2).
    dw = {(r.case.variant, r.case.phase) for r in planned["depthwise"]}
    assert {("v1", "forward"), ("v1", "input_grad"), ("w1", "weight_grad"), ("w2", "weight_grad")} <= dw


def test_the_plan_reaches_300_rows(capsys: pytest.CaptureFixture[str]) -> None:
    _, rows, est = sweep.describe(sweep.plan(sweep.kernel_families()), sweep.DEFAULT_REPS)
    assert rows >= 300
    assert est > 0


def _synthetic() -> list[sweep.Planned]:
    ok = conv_case("demo", "ours", F.conv2d, TINY, "forward")

    def broken(device: str) -> object:
        raise RuntimeError("not built for this shape\nsecond line")

    bad = Case("demo", "broken", TINY.id, "forward", TINY.min_bytes, broken)  # type: ignore[arg-type]
    anchors = sweep.anchor_cases("demo", [ok])
    ref = sweep.anchor_name("fp32", "nchw")
    return [sweep.Planned(ok, "fp32", ref), sweep.Planned(bad, "fp32", ref)] + [
        sweep.Planned(a, Conv2dProblem.from_id(a.problem_id).dtype, None) for a in anchors
    ]


def test_csv_schema_from_a_cpu_run(tmp_path: Path) -> None:
    rows = sweep.measure(_synthetic(), reps=3, device="cpu", machine="cpu-test", spec_bytes_per_s=1e12)
    path = tmp_path / "demo.csv"
    sweep.write_csv(path, rows)
    with path.open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == sweep.COLUMNS
        read = list(reader)
    variants = [r["variant"] for r in read]
    # the case, the failing case, the copy, and cuDNN anchors fp16 and fp32 in both layouts
    assert variants == [
        "ours",
        "broken",
        "copy",
        *(f"cudnn-{d}-{lay}" for d in ("fp16", "fp32") for lay in ("nchw", "nhwc")),
    ]
    ours, broken, copy = read[0], read[1], read[2]
    assert float(ours["median_us"]) > 0 and float(ours["spread"]) >= 0 and ours["reps"] == "3"
    assert float(ours["reference_us"]) == float(read[variants.index("cudnn-fp32-nchw")]["median_us"])
    assert float(ours["pct_hbm_spec"]) > 0 and ours["machine"] == "cpu-test"
    assert broken["median_us"] == "" and broken["note"] == "RuntimeError: not built for this shape"
    assert copy["phase"] == "copy" and int(copy["bytes"]) == TINY.min_bytes and copy["reference_us"] == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the stop without a GPU needs a machine without one")
def test_without_a_gpu_the_sweep_says_it_needs_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sweep.main(["pcilt", "--out", str(tmp_path)]) == 2
    assert "needs a GPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_family_without_a_plan_names_the_file() -> None:
    with pytest.raises(SystemExit, match=r"kernels/_controls/sweep_plan.py is missing"):
        sweep.family_cases("_controls")


def test_an_interrupt_keeps_the_rows_measured_so_far() -> None:
    """The window's cap stops a phase with SIGINT: the rows before it stay, noted where it stopped."""
    ok = conv_case("demo", "ours", F.conv2d, TINY, "forward")

    def stop(device: str) -> object:
        raise KeyboardInterrupt

    cut = Case("demo", "cut", TINY.id, "forward", TINY.min_bytes, stop)  # type: ignore[arg-type]
    planned = [
        sweep.Planned(ok, "fp32", None),
        sweep.Planned(cut, "fp32", None),
        sweep.Planned(ok, "fp32", None),
    ]
    rows = sweep.measure(planned, reps=2, device="cpu", machine="m", spec_bytes_per_s=None)
    assert [r["variant"] for r in rows] == ["ours", ""]
    assert float(rows[0]["median_us"]) > 0 and rows[1]["note"] == "interrupted"
