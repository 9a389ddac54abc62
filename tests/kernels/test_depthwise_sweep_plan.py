"""``kernels.depthwise.sweep_plan``: the depthwise rows of the kernel sweep."""

from __future__ import annotations

import pytest

from kernels.depthwise import sweep_plan
from pytest_convperf.problem import Conv2dProblem


def test_every_seed_shape_dtype_phase_and_variant_once() -> None:
    cases = sweep_plan.cases()
    keys = {(c.problem_id, c.phase, c.variant) for c in cases}
    assert len(cases) == len(keys) == 8 * 2 * 2 * 2
    assert {c.variant for c in cases} == {"v2", "v3"}
    for c in cases:
        p = Conv2dProblem.from_id(c.problem_id)
        assert p.groups == p.c_in and c.bytes_moved > 0 and c.predicted_us and c.predicted_us > 0


def test_v3_is_predicted_faster_on_the_largest_shape() -> None:
    by = {(c.problem_id, c.phase, c.variant): c for c in sweep_plan.cases() if "ci144-h56" in c.problem_id}
    for (pid, phase, variant), case in by.items():
        if variant == "v3":
            assert case.predicted_us < by[(pid, phase, "v2")].predicted_us  # type: ignore[operator]


def test_calls_need_cuda() -> None:
    with pytest.raises(ValueError, match="CUDA only"):
        sweep_plan.cases()[0].make_call("cpu")
