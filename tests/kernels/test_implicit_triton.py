"""fp32 implicit-GEMM conv (``kernels.im2col_gemm.implicit_triton``, ``ops.implicit_forward``) on the CPU.

The kernel runs under Triton's interpreter (the source the GPU compiles) against the fp64 conv with
the suite's tolerance, forward and backward; a planted defect (the dilation dropped from the row
offset) proves the check catches a wrong kernel; its launches are counted on meta tensors.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

pytest.importorskip("triton", reason="the Triton variants need triton (the suite extra)")

from kernels.im2col_gemm import implicit_triton, ops
from perf_tests.fuzz import small_problems
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.correctness_report import ConvMismatch
from pytest_convperf.correctness.oracle import assert_conv_close
from tests.kernels import launch_count
from tests.kernels.triton_planted import plant


@settings(max_examples=25, deadline=None)
@given(problem=small_problems())
def test_implicit_forward_and_backward_match_the_oracle(problem: Conv2dProblem) -> None:
    assert_conv_close(ops.implicit_forward, problem, backward=True, device="cpu")


def test_channels_last_input_gives_the_same_output() -> None:
    gen = torch.Generator().manual_seed(4)
    x, w, b = torch.randn(2, 12, 7, 9, generator=gen), torch.randn(6, 4, 3, 3, generator=gen), torch.randn(6)
    y = ops.implicit_forward(x, w, b, 2, 1, 1, 3)
    assert torch.equal(y, ops.implicit_forward(x.to(memory_format=torch.channels_last), w, b, 2, 1, 1, 3))


def test_a_planted_defect_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    plant(monkeypatch, implicit_triton, "_conv_f32", "+ (tap // KW) * DH", "+ (tap // KW)", key=True)
    problem = Conv2dProblem(n=1, c_in=4, h=9, w=9, c_out=4, kernel=(3, 3), padding=(2, 2), dilation=(2, 2))
    with pytest.raises(ConvMismatch):
        assert_conv_close(ops.implicit_forward, problem, device="cpu")


@pytest.mark.parametrize("shape", [(16, 64, 48, 48), (1, 64, 256, 256)])
def test_one_launch_and_no_buffer(monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...]) -> None:
    c = shape[1]
    x, w, b = (
        torch.empty(shape, device="meta"),
        torch.empty(c, c, 3, 3, device="meta"),
        torch.empty(c, device="meta"),
    )
    with launch_count.counting() as (rec, _), torch.no_grad():
        monkeypatch.setattr(
            implicit_triton, "kernel", lambda interpret: launch_count.Launcher(rec, "conv_f32")
        )
        y = ops.implicit_forward(x, w, b, 1, 1)
    assert rec.launches == ["triton:conv_f32"]
    assert [size for _, size in rec.allocations] == [y.numel() * 4]
    assert rec.bytes_moved == (x.numel() + w.numel() + b.numel() + y.numel()) * 4
