"""Issue 15 item 14 (dtype and shape are correctness), item 4 (inputs changed in place) and issue 13's
poisoned outputs (an output the candidate never wrote cannot pass)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.correctness_report import ConvMismatch
from pytest_convperf.correctness.oracle import assert_conv_close, check_conv

P = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=3, padding=1)


def as_fp64(x, w, b, *args):  # type: ignore[no-untyped-def]
    return F.conv2d(x.double(), w.double(), None if b is None else b.double(), *args)


def cropped(x, w, b, *args):  # type: ignore[no-untyped-def]
    return F.conv2d(x, w, b, *args)[..., :-1, :]


@pytest.mark.parametrize("backward", [False, True])
def test_a_float64_output_for_an_fp32_problem_fails(backward: bool) -> None:
    with pytest.raises(ConvMismatch, match=r"output has dtype torch.float64, expected torch.float32"):
        assert_conv_close(as_fp64, P, backward=backward)
    assert not check_conv(as_fp64, P, backward=backward).ok


@pytest.mark.parametrize("backward", [False, True])
def test_a_wrong_shape_is_one_clear_correctness_failure(backward: bool) -> None:
    report = check_conv(cropped, P, backward=backward)  # no ValueError, no autograd error
    assert not report.ok and report.reference_ok
    assert "output has shape (1, 4, 7, 8), expected (1, 4, 8, 8)" in report.message()
    assert "Mismatch in shape" not in report.message()
    with pytest.raises(ConvMismatch, match=r"shape \(1, 4, 7, 8\), expected \(1, 4, 8, 8\)"):
        assert_conv_close(cropped, P, backward=backward)


def test_a_non_tensor_output_is_a_correctness_failure() -> None:
    report = check_conv(lambda *a: F.conv2d(*a).tolist(), P)
    assert not report.ok and "returned list, not a torch.Tensor" in report.message()


def test_a_candidate_that_writes_its_input_in_place_fails_and_says_so() -> None:
    def zeroing(x, w, b, *args):  # type: ignore[no-untyped-def]
        out = F.conv2d(x, w, b, *args)
        x.zero_()  # e.g. reusing the input as scratch space
        return out

    report = check_conv(zeroing, P)
    assert not report.ok
    assert "changed its input in place" in report.message()


def test_an_output_the_candidate_never_wrote_is_nan_and_fails() -> None:
    def writes_nothing(x, w, b, *args):  # type: ignore[no-untyped-def]
        return torch.empty_like(F.conv2d(x, w, b, *args))  # right shape, dtype and device, no values

    report = check_conv(writes_nothing, P)
    assert not report.ok
    (out,) = report.candidate_errors
    assert out.nonfinite == out.numel  # every element NaN: poisoned before the candidate ran
    # The poison is on only while the candidate runs: the session's settings are restored.
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the caching allocator's recycling needs CUDA")
def test_negative_control_recycled_right_answer_on_cuda() -> None:
    """The hazard itself: the caching allocator hands the block of a freed right answer to the
    candidate's ``empty_like``; without the poison the candidate would pass."""
    answer: list[torch.Tensor] = []

    def lazy(x, w, b, *args):  # type: ignore[no-untyped-def]
        shape = F.conv2d(x, w, b, *args)  # an earlier right answer, freed on return
        answer.append(shape.detach().clone())
        del shape
        return torch.empty_like(answer[0])

    report = check_conv(lazy, P, device="cuda")
    assert not report.ok and report.candidate_errors[0].nonfinite > 0
