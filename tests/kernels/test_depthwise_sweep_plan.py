"""``kernels.depthwise.sweep_plan``: the depthwise rows of the kernel sweep."""

from __future__ import annotations

from kernels.depthwise import sweep_plan
from kernels.depthwise.seed import DEPTHWISE_SEED_SHAPES
from pytest_convperf.core.problem import Conv2dProblem


def test_every_row_once_and_the_tiled_rows_of_v1_v2_v3() -> None:
    cases = sweep_plan.cases()
    keys = {(c.problem_id, c.phase, c.variant) for c in cases}
    assert len(cases) == len(keys)
    shapes = len(DEPTHWISE_SEED_SHAPES)
    # NCHW forward/input grad: v1, v2, v3; every other (layout, phase): v2 only
    assert len(cases) == shapes * 2 * (2 * 3 + 1 + 3)
    assert {c.variant for c in cases} == {"v1", "v2", "v3"}
    for c in cases:
        p = Conv2dProblem.from_id(c.problem_id)
        assert p.groups == p.c_in and c.bytes_moved > 0
        tiled = p.layout == "nchw" and c.phase != "weight_grad"
        if tiled and c.variant != "v1":  # the calibrated model predicts what the GPU will measure
            assert c.predicted_us is not None and c.predicted_us > 0
        else:
            assert c.predicted_us is None


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
