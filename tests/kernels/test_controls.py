"""The negative controls are caught by correctness fuzzing (CPU twins, no GPU needed).

Each wrong control must make a Hypothesis fuzz over depthwise problems fail with ``ConvMismatch``,
while the correct reference passes the same fuzz (so the fuzz is not failing on everything).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kernels._controls import cpu
from kernels.depthwise import reference
from perf_tests.shapes import depthwise_problems
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.correctness_report import ConvMismatch
from pytest_convperf.correctness.oracle import assert_conv_close, check_conv

PROBLEMS = depthwise_problems(
    dtypes=("fp32",),
    kernel_sizes=(1, 2, 3, 4, 5),
    strides=(1, 2),
    dilations=(1, 2),
    max_channels=6,
    max_batch=2,
    max_out_size=12,
    max_elements=2**14,
)
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: we only need "found", fast
    suppress_health_check=[HealthCheck.too_slow],
)


def _fuzz(candidate: Callable[..., torch.Tensor], examples: int = 150) -> None:
    @settings(FUZZ, max_examples=examples)
    @given(problem=PROBLEMS, seed=st.integers(0, 2**16))
    def run(problem: Conv2dProblem, seed: int) -> None:
        assert_conv_close(candidate, problem, seed=seed, device="cpu")

    run()


@pytest.mark.parametrize("name", ["noop", "wrong_border", "wrong_odd_stride2"])
def test_fuzzing_catches_wrong_control(name: str) -> None:
    with pytest.raises(ConvMismatch):
        _fuzz(getattr(cpu, name))


def test_fuzzing_passes_the_reference() -> None:
    _fuzz(reference.forward, examples=50)


def test_slowed_control_is_correct() -> None:
    problem = Conv2dProblem(n=2, c_in=8, h=9, w=11, c_out=8, kernel=(3, 3), padding=(1, 1), groups=8)
    report = check_conv(cpu.slowed(0.5), problem, device="cpu")
    assert report.ok, report.message()


def test_slowed_rejects_bad_fraction() -> None:
    with pytest.raises(ValueError, match="fraction"):
        cpu.slowed(0.0)


def test_each_defect_shows_only_where_designed() -> None:
    """Sharp edges of each defect, so a control cannot silently become always-wrong or never-wrong."""
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64)
    w = torch.randn(3, 1, 3, 3, dtype=torch.float64)
    ok = reference.forward(x, w, None, 1, 0, 1, 3)
    # no padding: the border bug has nothing to clamp
    torch.testing.assert_close(cpu.wrong_border(x, w, None, 1, 0, 1, 3), ok)
    padded = reference.forward(x, w, None, 1, 1, 1, 3)
    bad = cpu.wrong_border(x, w, None, 1, 1, 1, 3)
    torch.testing.assert_close(bad[..., :-1, :-1], padded[..., :-1, :-1])
    assert not torch.allclose(bad[..., -1, :], padded[..., -1, :])
    # stride 2: wrong only for odd widths, and only in the last column
    torch.testing.assert_close(
        cpu.wrong_odd_stride2(x[..., :8], w, None, 2, 1, 1, 3),
        reference.forward(x[..., :8], w, None, 2, 1, 1, 3),
    )
    good = reference.forward(x, w, None, 2, 1, 1, 3)
    bad = cpu.wrong_odd_stride2(x, w, None, 2, 1, 1, 3)
    torch.testing.assert_close(bad[..., :-1], good[..., :-1])
    assert not torch.allclose(bad[..., -1], good[..., -1])
