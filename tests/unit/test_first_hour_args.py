"""Argument traps of issue 24.4: one value where a sequence is expected, a shape where a problem is."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from pytest_convperf.core.problem import Conv2dProblem, require_problem
from pytest_convperf.core.strategies import conv2d_problems


@settings(max_examples=5, deadline=None, database=None)
@given(conv2d_problems(dtypes=torch.float32, kinds="dense", layouts="nhwc"))
def test_a_single_dtype_kind_or_layout_means_that_one(problem: Conv2dProblem) -> None:
    assert (problem.dtype, problem.layout, problem.kernel != (1, 1)) == ("fp32", "nhwc", True)


def test_a_shape_where_a_problem_goes_names_the_fix() -> None:
    with pytest.raises(TypeError, match=r"convperf.check takes a Conv2dProblem, not tuple \(8, 32, 56, 56\)"):
        require_problem((8, 32, 56, 56), "convperf.check")
    p = Conv2dProblem(n=1, c_in=2, h=5, w=5, c_out=3, kernel=3)
    assert require_problem(p, "x") is p


def test_calibrate_selects_the_timed_checks_within_a_given_marker_expression() -> None:
    from pytest_convperf.__main__ import timed_only

    assert timed_only(["t.py", "-k", "x"]) == ["t.py", "-k", "x", "-m", "convperf"]
    assert timed_only(["-m", "not slow", "t.py"]) == ["t.py", "-m", "(not slow) and convperf"]
    assert timed_only(["-mfast", "t.py"]) == ["t.py", "-m", "(fast) and convperf"]
