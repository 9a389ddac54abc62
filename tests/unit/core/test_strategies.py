"""Strategies: every problem is valid by construction and the space reaches its edges."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, find, given, settings
from hypothesis.errors import InvalidArgument

from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.core.profiles import PROFILES, register_profiles
from pytest_convperf.core.strategies import EDGE_SIZES, conv2d_problems

SMALL = dict(max_elements=2**16, max_channels=17, max_out_size=17, max_batch=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv2d_problems(dtypes=("fp32", "fp64"), layouts=("nchw", "nhwc"), min_batch=0, **SMALL))
def test_every_problem_is_accepted_by_f_conv2d_on_cpu(problem: Conv2dProblem) -> None:
    x, w, b = problem.make_inputs(0)
    y = F.conv2d(x, w, b, *problem.conv_args())
    assert tuple(y.shape) == problem.output_shape


@settings(max_examples=2000, deadline=None)
@given(conv2d_problems(dtypes=("fp32", "fp16", "bf16"), layouts=("nchw", "nhwc"), min_batch=0))
def test_thousands_of_examples_respect_the_budget(problem: Conv2dProblem) -> None:
    budget = 2**22
    assert problem.n * problem.c_in * problem.h * problem.w <= budget
    assert problem.n * problem.c_out * problem.out_h * problem.out_w <= budget
    # Shape arithmetic only (meta tensors): thousands of real convs would be slow here.
    x = torch.empty(problem.input_shape, device="meta")
    w = torch.empty(problem.weight_shape, device="meta")
    assert tuple(F.conv2d(x, w, None, *problem.conv_args()).shape) == problem.output_shape


@pytest.mark.parametrize("kind", ["dense", "grouped", "depthwise", "pointwise"])
def test_kinds_are_what_they_say(kind: str) -> None:
    p = find(conv2d_problems(kinds=(kind,)), lambda p: True)  # type: ignore[arg-type]
    assert p.kind == kind


def _reaches(predicate: object, **knobs: object) -> Conv2dProblem:
    return find(
        conv2d_problems(**knobs),  # type: ignore[arg-type]
        predicate,  # type: ignore[arg-type]
        settings=settings(max_examples=2000, database=None),
    )


@pytest.mark.parametrize("edge", [e for e in EDGE_SIZES if e > 1])
def test_reaches_tile_edges(edge: int) -> None:
    p = _reaches(lambda p: p.out_w == edge)
    assert p.out_w == edge


def test_reaches_even_and_non_square_kernels_multipliers_and_batch_one() -> None:
    assert _reaches(lambda p: p.kernel[0] % 2 == 0 and p.kernel[0] != p.kernel[1]).kernel[0] % 2 == 0
    assert _reaches(lambda p: p.kind == "depthwise" and p.multiplier > 1).multiplier > 1
    assert _reaches(lambda p: p.n == 1).n == 1
    assert _reaches(lambda p: p.n == 0, min_batch=0).n == 0
    assert _reaches(lambda p: p.stride == (3, 3) and p.dilation == (3, 3)).stride == (3, 3)


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"kinds": ()}, "kinds must not be empty"),
        ({"kinds": ("winograd",)}, "kinds has"),
        ({"dtypes": ("fp8",)}, "dtypes has"),
        ({"strides": (0,)}, "strides has"),
        ({"max_batch": 0}, "max_batch=0 must be >= 1"),
        ({"max_elements": 10}, "max_elements=10 is too small.*raise max_elements or lower strides"),
        (
            {"max_elements": 2**8, "max_channels": 65},
            "max_elements=256 is too small.*raise max_elements or lower max_channels",
        ),
        (
            {"max_elements": 2**10, "kernel_sizes": (7,), "dilations": (3,)},
            "raise max_elements or lower dilations, kernel_sizes",
        ),
    ],
)
def test_bad_knobs_are_rejected(knobs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        find(conv2d_problems(**knobs), lambda p: True)  # type: ignore[arg-type]


def test_profiles_registered() -> None:
    register_profiles()
    for name in PROFILES:
        profile = settings.get_profile(name)
        assert profile.deadline is None
    assert settings.get_profile("convperf-ci").derandomize
    assert settings.get_profile("convperf-nightly").max_examples >= 1000
