"""``kernels.model.calibration``: the calibrated cost model, its fit and its CI check."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from kernels import h100
from kernels.model import calibration as cal
from kernels.model.__main__ import main
from kernels.model.static import Shape

H100 = Path(__file__).resolve().parents[2] / "baselines" / "nvidia-h100-80gb-hbm3"


def test_loads_all_96_measured_rows() -> None:
    rows = cal.load_rows(H100)
    assert len(rows) == 96
    assert {r.phase for r in rows} == {"forward", "input_grad", "weight_grad"}
    assert {r.shape.dtype_bytes for r in rows} == {2, 4}


def test_stored_fit_meets_the_goal_on_the_h100_rows() -> None:
    errs = cal.errors(cal.load_rows(H100))
    med, worst = cal.summary(errs)
    assert med <= cal.GOAL_MEDIAN and worst <= cal.GOAL_MAX, (med, worst)


def _write_baseline(tmp_path: Path, factor_for: dict[str, float]) -> Path:
    doc = yaml.safe_load((H100 / cal.BASELINE_FILE).read_text())
    for key, entry in doc["benchmarks"].items():
        for part, f in factor_for.items():
            if part in key:
                entry["us"]["candidate"] *= f
    (tmp_path / cal.BASELINE_FILE).write_text(yaml.safe_dump(doc))
    return tmp_path


def test_check_exits_nonzero_when_the_model_misses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--check", str(H100)]) == 0
    slow = _write_baseline(tmp_path, {"-forward]": 2.0})  # every forward twice as slow as measured
    assert main(["--check", str(slow)]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_missing_baseline_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"test_depthwise\.yaml"):
        cal.load_rows(tmp_path)


def _synthetic(p: cal.Params) -> list[cal.Row]:
    """Rows whose times are exactly the model's under ``p`` (two seed shapes)."""
    rows = [r for r in cal.load_rows(H100) if r.shape.label in ("16x144x56-k3", "16x1152x7-k5")]
    return [replace(r, us=cal.predict(r, p) * 1e6) for r in rows]


def test_fit_recovers_a_model_that_generated_the_data() -> None:
    truth = replace(
        cal.H100_FIT, round_s=cal.H100_FIT.round_s * 1.6, issue_tile=cal.H100_FIT.issue_tile * 0.7
    )
    rows = _synthetic(truth)
    before = cal.summary(cal.errors(rows))[1]
    fitted = cal.fit(rows, iters=1500)
    assert before > 0.05  # the stored constants do not already explain the synthetic rows
    assert cal.summary(cal.errors(rows, fitted))[1] < 0.01


def test_held_out_predicts_each_shape_from_the_others() -> None:
    rows = _synthetic(cal.H100_FIT)
    held = cal.held_out(rows, iters=300)
    assert len(held) == len(rows)
    assert max(abs(e) for e in held) < 0.05  # data the model generated: the refits barely move


def test_fewer_staging_rounds_predict_less_time_on_a_latency_bound_shape() -> None:
    sh = Shape(16, 144, 56, 3)
    v2 = cal.launch_of(sh, "nchw", "forward")
    v3 = cal.launch_of(sh, "nchw", "forward", "v3")
    assert (v2.rounds, v3.rounds) == (3, 1)
    assert cal.predict_launch(v3, "cold") < cal.predict_launch(v2, "cold")


def test_a_partial_last_wave_costs_a_whole_wave() -> None:
    p = replace(cal.H100_FIT, issue_tile=0.0, launch_cold_s=0.0)
    full = cal.Launch("tile", 0, h100.SMS * 4, 3, 4, 1, 0)
    spill = replace(full, blocks=h100.SMS * 4 + 1)
    assert cal.predict_launch(spill, "cold", p) == pytest.approx(2 * cal.predict_launch(full, "cold", p))


def test_dram_bound_when_latency_and_issue_are_free() -> None:
    p = replace(cal.H100_FIT, round_s=0.0, issue_tile=0.0)
    sh = Shape(16, 32, 112, 3)
    t = cal.predict_launch(cal.launch_of(sh, "nchw", "forward"), "cold", p)
    assert t == pytest.approx(p.launch_cold_s + sh.bytes / cal.COPY_BPS)


def test_v3_nhwc_borrows_the_row_kernels_issue_figure_scaled_by_static_counts() -> None:
    """fwd_nhwc_vec has no measured row: its issue term is the NHWC kind's fitted figure times the
    ratio of static SASS instructions per output, its grid and rounds mirrored from depthwise.cu."""
    sh = Shape(16, 144, 56, 3, 1, 4)
    v2, v3 = cal.launch_of(sh, "nhwc", "forward"), cal.launch_of(sh, "nhwc", "forward", "v3")
    assert v2.issue_scale == 1.0 and v3.kind == v2.kind == "nhwc"
    want = cal.nhwc_instr_per_output(sh, True) / cal.nhwc_instr_per_output(sh, False)
    assert v3.issue_scale == pytest.approx(want) and 0 < want < 1
    plan = cal.nhwc_vec_plan(sh)
    assert (plan.vw, plan.ct, plan.strip) == (4, 8, 8)
    assert v3.rounds == (plan.strip - 1) + sh.k  # one round of k 16-byte loads per input row
    # doubling the per-iteration instructions of the vector kernel raises its predicted issue time
    base = cal.predict_launch(v3, "cold")
    assert cal.predict_launch(replace(v3, issue_scale=2 * v3.issue_scale), "cold") >= base


def test_v3_nhwc_falls_back_where_the_kernel_does() -> None:
    """C not a multiple of the vector width (fp16: 8) keeps the row kernel, as dispatch_nhwc does."""
    sh = Shape(16, 36, 28, 3, 1, 2)
    assert cal.launch_of(sh, "nhwc", "forward", "v3") == cal.launch_of(sh, "nhwc", "forward")


def test_nhwc_goal_lines_name_both_dtypes() -> None:
    lines = cal.nhwc_goal_lines(cal.load_rows(H100))
    assert [line.split()[0] for line in lines] == ["fp32", "fp16"]
    assert all("geomean" in line and "goal geomean >= 1.0x" in line for line in lines)
