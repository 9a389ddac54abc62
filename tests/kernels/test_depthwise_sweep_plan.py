"""``kernels.depthwise.sweep_plan``: the depthwise rows of the kernel sweep."""

from __future__ import annotations

from kernels.depthwise import sweep_plan
from kernels.depthwise.seed import DEPTHWISE_SEED_SHAPES
from kernels.model.calibration import predicted_us
from pytest_convperf.core.problem import Conv2dProblem


def test_every_row_once_and_the_tiled_rows_of_v1_to_v4() -> None:
    cases = sweep_plan.cases()
    keys = {(c.problem_id, c.phase, c.variant) for c in cases}
    assert len(cases) == len(keys)
    shapes = len(DEPTHWISE_SEED_SHAPES)
    # NCHW forward/input grad: v1, v2, v3, v4; NHWC forward/input grad: v2, v3; weight grad: w1, w2
    # (NCHW), w2, w3 (NHWC)
    assert len(cases) == shapes * 2 * (2 * 4 + 2 * 2 + 2 + 2)
    assert {c.variant for c in cases} == {"v1", "v2", "v3", "v4", "w1", "w2", "w3"}
    for c in cases:
        p = Conv2dProblem.from_id(c.problem_id)
        assert p.groups == p.c_in and c.bytes_moved > 0
        assert (c.variant in ("w1", "w2", "w3")) == (c.phase == "weight_grad")
        assert c.variant != "w3" or p.layout == "nhwc"  # on NCHW w3 is w2: no row of its own
        # the calibrated model predicts what the GPU will measure (not v1, not the NHWC w2 grads)
        if c.variant != "v1" and not (p.layout == "nhwc" and c.variant == "w2"):
            assert c.predicted_us is not None and c.predicted_us > 0
        else:
            assert c.predicted_us is None


def test_w2_weight_grad_is_predicted_faster_than_w1() -> None:
    by = {
        (c.problem_id, c.variant): c
        for c in sweep_plan.cases()
        if c.phase == "weight_grad" and c.predicted_us
    }
    pairs = [pid for pid, v in by if v == "w2"]
    assert len(pairs) == len(DEPTHWISE_SEED_SHAPES) * 2  # fp32 and fp16, NCHW
    for pid in pairs:
        assert by[(pid, "w2")].predicted_us < by[(pid, "w1")].predicted_us  # type: ignore[operator]


def test_v3_is_predicted_faster_on_the_largest_shape() -> None:
    by = {
        (c.problem_id, c.phase, c.variant): c
        for c in sweep_plan.cases()
        if "ci144-h56" in c.problem_id and c.predicted_us is not None
    }
    v3 = [(pid, phase) for (pid, phase, variant) in by if variant == "v3"]
    assert v3
    for pid, phase in v3:
        assert by[(pid, phase, "v3")].predicted_us < by[(pid, phase, "v2")].predicted_us  # type: ignore[operator]


def test_v3_nhwc_rows_time_old_against_new() -> None:
    """Every NHWC forward / input-grad seed row has v2 (the row kernel) and v3 (fwd_nhwc_vec), both
    predicted, v3 predicted faster (docs/tuning-log.md step 8)."""
    by = {
        (c.problem_id, c.phase, c.variant): c
        for c in sweep_plan.cases()
        if "-nhwc" in c.problem_id and c.phase != "weight_grad"
    }
    pairs = {(pid, phase) for pid, phase, _ in by}
    assert len(pairs) == len(DEPTHWISE_SEED_SHAPES) * 2 * 2  # fp32/fp16 x forward/input grad
    for pid, phase in pairs:
        v2, v3 = by[(pid, phase, "v2")], by[(pid, phase, "v3")]
        assert v3.predicted_us is not None and v2.predicted_us is not None
        assert v3.predicted_us < v2.predicted_us, (pid, phase)


def test_w3_nhwc_weight_grad_rows_time_old_against_new() -> None:
    """Every NHWC weight-grad seed row has w3 (wgrad_nhwc_vec, predicted) beside w2 (the generic NHWC
    kernel it replaces), in one process; the model puts w3 ahead of its own w2 prediction
    (docs/tuning-log.md step 9)."""
    rows = [c for c in sweep_plan.cases() if "-nhwc" in c.problem_id and c.phase == "weight_grad"]
    by = {(c.problem_id, c.variant): c for c in rows}
    pids = {pid for pid, _ in by}
    assert len(pids) == len(DEPTHWISE_SEED_SHAPES) * 2  # fp32, fp16
    for shape in DEPTHWISE_SEED_SHAPES:
        for dtype in sweep_plan.DTYPES:
            w3 = predicted_us(shape, dtype, "weight_grad", "w3", "nhwc")
            assert w3 < predicted_us(shape, dtype, "weight_grad", "w2", "nhwc"), (shape, dtype)
    for pid in pids:
        assert {v for p, v in by if p == pid} == {"w2", "w3"}
