"""The fp64 oracle passes correct candidates and catches each negative control by name."""

from __future__ import annotations

import math
import os
import re
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.core.strategies import conv2d_problems
from pytest_convperf.correctness.correctness_report import ConvMismatch, ReferenceDefect
from pytest_convperf.correctness.oracle import assert_conv_close, check_conv, describe, reproduce
from pytest_convperf.correctness.tolerance import error_stats, tolerance

PROBLEM = Conv2dProblem(n=2, c_in=6, h=11, w=9, c_out=6, kernel=3, padding=1, groups=3)


def correct(x: torch.Tensor, w: torch.Tensor, b: Any, s: Any, p: Any, d: Any, g: int) -> torch.Tensor:
    return F.conv2d(x, w, b, s, p, d, g)


def all_zeros(x: torch.Tensor, w: torch.Tensor, b: Any, s: Any, p: Any, d: Any, g: int) -> torch.Tensor:
    return torch.zeros_like(F.conv2d(x, w, b, s, p, d, g))


def wrong_border_padding(
    x: torch.Tensor, w: torch.Tensor, b: Any, s: Any, p: Any, d: Any, g: int
) -> torch.Tensor:
    # Replicate-pads instead of zero-pads: right everywhere but the border.
    padded = F.pad(x, (p[1], p[1], p[0], p[0]), mode="replicate")
    return F.conv2d(padded, w, b, s, 0, d, g)


def one_wrong_element(
    x: torch.Tensor, w: torch.Tensor, b: Any, s: Any, p: Any, d: Any, g: int
) -> torch.Tensor:
    y = F.conv2d(x, w, b, s, p, d, g).clone()
    y[1, 4, 7, 5] += 1e-2
    return y


def nan_output(x: torch.Tensor, w: torch.Tensor, b: Any, s: Any, p: Any, d: Any, g: int) -> torch.Tensor:
    y = F.conv2d(x, w, b, s, p, d, g).clone()
    y[0, 0, 0, 0] = math.nan
    return y


class _WrongWeightGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: Any, args: Any) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.args = args
        return F.conv2d(x, w, b, *args)

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Any:
        x, w = ctx.saved_tensors
        s, p, d, g = ctx.args
        gx = torch.nn.grad.conv2d_input(x.shape, w, gy, s, p, d, g)
        gw = torch.nn.grad.conv2d_weight(x, w.shape, gy, s, p, d, g)
        return gx, gw * 1.01, gy.sum((0, 2, 3)), None


def wrong_weight_grad(
    x: torch.Tensor, w: torch.Tensor, b: Any, s: Any, p: Any, d: Any, g: int
) -> torch.Tensor:
    return _WrongWeightGrad.apply(x, w, b, (s, p, d, g))  # type: ignore[no-any-return]


def raises(x: torch.Tensor, w: torch.Tensor, b: Any, s: Any, p: Any, d: Any, g: int) -> torch.Tensor:
    raise RuntimeError("kernel launch failed: invalid configuration")


def test_correct_candidate_passes_forward_and_backward() -> None:
    report = assert_conv_close(correct, PROBLEM, backward=True, seed=3)
    assert report.ok and report.reference_ok
    names = [e.name for e in report.candidate_errors]
    assert names == ["output", "grad_input", "grad_weight", "grad_bias"]
    assert all(e.max_abs < e.atol for e in report.candidate_errors)


@pytest.mark.parametrize(
    ("candidate", "backward", "expect"),
    [
        (all_zeros, False, r"output: FAIL .*elements out of tolerance"),
        (wrong_border_padding, False, r"output: FAIL"),
        (one_wrong_element, False, r"worst at \[1, 4, 7, 5\].*1/\d+ elements out of tolerance"),
        (nan_output, False, r"1 NaN/Inf where the oracle is finite"),
        (wrong_weight_grad, True, r"grad_weight: FAIL"),
        (raises, False, r"raised RuntimeError: kernel launch failed"),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_negative_controls_fail_with_the_right_message(candidate: Any, backward: bool, expect: str) -> None:
    with pytest.raises(ConvMismatch) as info:
        assert_conv_close(candidate, PROBLEM, backward=backward, seed=11)
    message = str(info.value)
    assert PROBLEM.id in message
    assert "seed 11" in message
    if candidate is not raises:
        assert "max_abs=" in message and "max_rel=" in message
    assert re.search(expect, message), message
    assert "repro: python -c" in message


def test_wrong_border_is_only_wrong_at_the_border() -> None:
    report = check_conv(wrong_border_padding, PROBLEM, seed=5)
    (out,) = report.candidate_errors
    assert not out.ok
    _, _, row, col = out.worst_index
    assert row in (0, PROBLEM.out_h - 1) or col in (0, PROBLEM.out_w - 1)


def test_weight_grad_error_does_not_taint_other_grads() -> None:
    report = check_conv(wrong_weight_grad, PROBLEM, seed=2, backward=True)
    status = {e.name: e.ok for e in report.candidate_errors}
    assert status == {"output": True, "grad_input": True, "grad_weight": False, "grad_bias": True}


def test_wrong_reference_is_reported_as_a_reference_defect() -> None:
    with pytest.raises(ReferenceDefect) as info:
        assert_conv_close(correct, PROBLEM, reference=one_wrong_element, seed=1)
    report_error = str(info.value)
    assert report_error.startswith("REFERENCE DEFECT")
    assert f"candidate {describe(correct)} is correct" in report_error


def test_both_wrong_blames_the_candidate_and_notes_the_reference() -> None:
    with pytest.raises(ConvMismatch, match=r"the reference .* is also off"):
        assert_conv_close(all_zeros, PROBLEM, reference=one_wrong_element, seed=1)


def test_repro_line_reproduces() -> None:
    report = check_conv(one_wrong_element, PROBLEM, seed=9)
    name = describe(one_wrong_element)
    assert name.endswith("test_oracle:one_wrong_element")
    assert f"reproduce('{name}'" in report.repro()
    again = reproduce(name, PROBLEM.id, seed=9, device="cpu")
    assert not again.ok
    assert again.candidate_errors[0].max_abs == report.candidate_errors[0].max_abs


def test_tolerance_scales_with_sqrt_k_and_dtype() -> None:
    a32, r32 = tolerance("fp32", 100, 2.0)
    assert r32 == 1e-5 and a32 == pytest.approx(2e-6 * 10 * 2.0)
    a16, _ = tolerance("fp16", 400, 2.0)
    assert a16 == pytest.approx(1e-3 * 20 * 2.0)
    assert tolerance("bf16", 1, 1.0)[1] == 1.6e-2


def test_error_stats_nan_never_passes_even_with_huge_tolerance() -> None:
    expected = torch.ones(4, dtype=torch.float64)
    actual = torch.tensor([1.0, math.nan, 1.0, math.inf])
    stats = error_stats("output", actual, expected, atol=1e9, rtol=1e9)
    assert not stats.ok and stats.nonfinite == 2


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_low_precision_dense_conv_passes_its_own_row(dtype: str) -> None:
    p = Conv2dProblem(n=2, c_in=16, h=12, w=12, c_out=8, kernel=3, padding=1, dtype=dtype)

    # The candidate computes in fp32 and rounds once: what a correct fp32-accumulating kernel does.
    def fp32_accumulate(x: torch.Tensor, w: torch.Tensor, b: Any, *args: Any) -> torch.Tensor:
        out = F.conv2d(x.float(), w.float(), None if b is None else b.float(), *args)
        return out.to(x.dtype)

    assert_conv_close(fp32_accumulate, p, reference=fp32_accumulate, seed=0, backward=False)


@settings(max_examples=40, deadline=None)
@given(
    conv2d_problems(
        dtypes=("fp32",),
        layouts=("nchw", "nhwc"),
        max_elements=2**15,
        max_channels=16,
        max_out_size=16,
        max_batch=3,
    )
)
def test_f_conv2d_matches_its_oracle_on_random_problems(problem: Conv2dProblem) -> None:
    assert_conv_close(correct, problem, backward=True)


def _users_helper(x: torch.Tensor) -> torch.Tensor:
    raise ValueError("tile size must divide 7")


def calls_a_helper_that_raises(
    x: torch.Tensor, w: torch.Tensor, b: Any, s: Any, p: Any, d: Any, g: int
) -> Any:
    return _users_helper(x)


def half_output(x: torch.Tensor, w: torch.Tensor, b: Any, s: Any, p: Any, d: Any, g: int) -> torch.Tensor:
    return F.conv2d(x, w, b, s, p, d, g).half()


def test_a_raising_candidate_shows_the_traceback_into_the_users_code_not_the_plugins() -> None:
    report = check_conv(calls_a_helper_that_raises, PROBLEM, seed=2)
    message = report.message()
    assert "raised ValueError: tile size must divide 7" in message
    assert "in calls_a_helper_that_raises" in message and "in _users_helper" in message
    assert "pytest_convperf" + os.sep not in message.replace("pytest_convperf.correctness.oracle", ""), (
        message
    )


def test_an_fp16_output_where_fp32_was_expected_fails_saying_dtype() -> None:
    report = check_conv(half_output, PROBLEM, seed=2)
    assert not report.ok
    assert "output has dtype torch.float16, expected torch.float32" in report.message()
