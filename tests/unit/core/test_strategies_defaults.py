"""conv2d_problems scales its unset knobs to a small budget and takes dtype aliases (issue 16, item 5)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import InvalidArgument

from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.core.strategies import conv2d_problems


@pytest.mark.parametrize("budget", [2**16, 2**12, 2**9])
def test_small_budget_with_default_knobs_draws_problems_within_it(budget: int) -> None:
    seen: list[Conv2dProblem] = []

    @settings(max_examples=50, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(conv2d_problems(max_elements=budget))
    def draw(problem: Conv2dProblem) -> None:
        seen.append(problem)
        assert problem.n * problem.c_in * problem.h * problem.w <= budget
        assert problem.n * problem.c_out * problem.out_h * problem.out_w <= budget
        assert (
            problem.c_out * (problem.c_in // problem.groups) * problem.kernel[0] * problem.kernel[1] <= budget
        )

    draw()
    assert len(seen) == 50


def test_small_budget_shrinks_channels_first_and_keeps_dilated_7x7_kernels() -> None:
    # 2**16 cannot hold 65 channels x multiplier 3 at a 7x7 kernel with dilation 3 (94380 elements
    # for one image) but holds 32 channels: channels halve, the kernel and dilation edges stay.
    @settings(max_examples=300, database=None, deadline=None)
    @given(conv2d_problems(max_elements=2**16))
    def check(problem: Conv2dProblem) -> None:
        assert problem.c_in <= 32
        assert problem.c_out <= (32 * 3 if problem.kind == "depthwise" else 32)

    check()
    from hypothesis import find

    p = find(
        conv2d_problems(max_elements=2**16),
        lambda p: p.kernel[0] == 7 and p.dilation[0] == 3,
        settings=settings(max_examples=2000, database=None),
    )
    assert p.kernel[0] == 7


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("float32", "fp32"),
        ("torch.float16", "fp16"),
        ("half", "fp16"),
        ("bfloat16", "bf16"),
        ("double", "fp64"),
    ],
)
def test_dtypes_accept_aliases(alias: str, canonical: str) -> None:
    from hypothesis import find

    p = find(conv2d_problems(dtypes=(alias,), max_elements=2**12), lambda p: True)
    assert p.dtype == canonical


def test_unknown_dtype_names_the_argument_and_the_accepted_names() -> None:
    from hypothesis import find

    with pytest.raises(InvalidArgument, match=r"dtypes has 'fp8'.*fp32.*float32"):
        find(conv2d_problems(dtypes=("fp8",)), lambda p: True)


def test_the_budget_bounds_the_weight_of_a_dense_kernel_too() -> None:
    """Drawn once in a local run of the fast tier: max_elements=512 gave a 4 x 4 x 6 x 6 dense weight (576
    elements) and the strategy raised; the fit now shrinks the kernel sizes for the weight too."""

    @settings(max_examples=1500, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(conv2d_problems(max_elements=512, kinds=("dense",)))
    def draw(p: Conv2dProblem) -> None:
        assert p.c_out * p.c_in * p.kernel[0] * p.kernel[1] <= 512

    draw()
