"""LSQ int8 v2 (Triton implicit GEMM, ``kernels.im2col_gemm.lsq_triton``) on the CPU, and what one call
of each int8 / fp32 path launches and allocates at the seed size (counted on meta tensors).

The kernels run under Triton's interpreter (the same source the GPU compiles); the accumulators are
compared with an int64 conv of the codes, bit for bit. A planted defect (the padding offset dropped
from the input row) proves the comparison catches a wrong kernel.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

pytest.importorskip("triton", reason="the Triton variants need triton (the suite extra)")

from kernels.conv_args import ConvArgs
from kernels.im2col_gemm import lsq_triton, ops
from kernels.quant import quantize_codes, step_tensor
from perf_tests.fuzz import small_problems
from pytest_convperf.core.problem import Conv2dProblem
from tests.kernels import launch_count
from tests.kernels.triton_planted import plant

SA, SW = 0.04, 0.01
L2_BYTES = 24 * 1024 * 1024
SEED = Conv2dProblem(n=16, c_in=256, h=48, w=48, c_out=256, kernel=(3, 3), padding=(1, 1))


@contextmanager
def lsq_variant(name: str) -> Iterator[None]:
    old = os.environ.get(ops.LSQ_VARIANT_ENV)
    os.environ[ops.LSQ_VARIANT_ENV] = name
    try:
        yield
    finally:
        if old is None:
            del os.environ[ops.LSQ_VARIANT_ENV]
        else:
            os.environ[ops.LSQ_VARIANT_ENV] = old


def _exact(x: torch.Tensor, w: torch.Tensor, a: ConvArgs, bits: int = 8) -> torch.Tensor:
    """int64 oracle: the codes conv in float64 (exact: |sum| < 2**53) read back as int64."""
    xq = quantize_codes(x, SA, bits).double()
    wq = quantize_codes(w, SW, bits).double()
    return F.conv2d(xq, wq, None, a.stride, a.padding, a.dilation, a.groups).long()


def _args(problem: Conv2dProblem) -> ConvArgs:
    stride, padding, dilation, groups = problem.conv_args()
    return ConvArgs(problem.kernel, stride, padding, dilation, groups)  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(problem=small_problems())
def test_v2_accumulators_are_exact(problem: Conv2dProblem) -> None:
    x, w, _ = problem.make_inputs(seed=2)
    with lsq_variant("v2"):
        stride, padding, dilation, groups = problem.conv_args()
        acc = ops.lsq_accumulate(x, w, stride, padding, dilation, groups, act_step=SA, weight_step=SW)
    assert acc.dtype == torch.int32
    assert torch.equal(acc.long(), _exact(x, w, _args(problem)))


@pytest.mark.parametrize("by_value", [True, False])
@pytest.mark.parametrize("bits", [4, 8])
def test_v2_steps_by_value_or_pointer_and_the_epilogue(by_value: bool, bits: int) -> None:
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 40, 6, 7, generator=gen).to(memory_format=torch.channels_last)  # 40 ch: CGP pad 64
    w = torch.randn(24, 20, 3, 3, generator=gen)
    b = torch.randn(24, generator=gen)
    a = ConvArgs((3, 3), (1, 2), (1, 0), (2, 1), 2)
    sx, sw = step_tensor(SA), step_tensor(SW)
    acc = lsq_triton.conv(x, w, None, a, act_step=sx, weight_step=sw, bits=bits, accumulate=True,
                          steps_by_value=by_value)  # fmt: skip
    exact = _exact(x, w, a, bits)
    assert torch.equal(acc.long(), exact)
    y = lsq_triton.conv(x, w, b, a, act_step=sx, weight_step=sw, bits=bits, accumulate=False,
                        steps_by_value=by_value)  # fmt: skip
    expect = exact.float() * (sx * sw) + b.view(1, -1, 1, 1)
    assert torch.allclose(y, expect, rtol=1e-6, atol=1e-6)


def test_a_planted_defect_in_the_implicit_gemm_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drop the padding offset from the input row (reads stay in bounds, values shift): caught."""
    plant(
        monkeypatch,
        lsq_triton,
        "_implicit_gemm",
        "iy = oy * SH - PH + ",
        "iy = oy * SH + ",
        key=("implicit_gemm", True),
    )
    problem = Conv2dProblem(n=1, c_in=8, h=6, w=6, c_out=8, kernel=(3, 3), padding=(1, 1))
    x, w, _ = problem.make_inputs(seed=3)
    acc = lsq_triton.conv(x, w, None, _args(problem), act_step=step_tensor(SA), weight_step=step_tensor(SW),
                          bits=8, accumulate=True)  # fmt: skip
    assert not torch.equal(acc.long(), _exact(x, w, _args(problem)))


def test_variant_switch_names_the_choices() -> None:
    with (
        lsq_variant("v3"),
        pytest.raises(ValueError, match=r"CONVPERF_LSQ_VARIANT='v3' must be one of v1, v2"),
    ):
        ops.lsq_variant()


# ---- launches and allocations per call at the seed size (meta tensors, nothing computed) ----------
def _seed(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    p = SEED
    x = torch.empty(p.n, p.c_in, p.h, p.w, dtype=dtype, device="meta")
    w = torch.empty(p.c_out, p.c_in, 3, 3, dtype=dtype, device="meta")
    return x, w, torch.empty(p.c_out, dtype=dtype, device="meta")


def _count_lsq(monkeypatch: pytest.MonkeyPatch, variant: str) -> tuple[launch_count.Record, torch.Tensor]:
    x, w, b = _seed(torch.float16)
    with launch_count.counting() as (rec, mode), lsq_variant(variant), torch.no_grad():
        launch_count.stub_triton(monkeypatch, lsq_triton, rec)
        launch_count.stub_im2col(monkeypatch, ops, rec, mode)
        y = ops.lsq_forward(x, w, b, 1, 1, act_step=SA, weight_step=SW)
    return rec, y


def test_int8_v2_is_three_launches_without_a_big_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    rec, y = _count_lsq(monkeypatch, "v2")
    assert rec.launches == ["triton:quantize_pack", "triton:quantize_pack", "triton:implicit_gemm"]
    assert rec.big_allocations(L2_BYTES, exempt=(y,)) == []
    # x (fp16) -> codes, w -> codes, codes + w codes + bias -> output: 1.5x the problem's minimum bytes
    assert rec.bytes_moved <= 1.6 * SEED.replace(dtype="fp16").min_bytes, rec.traffic


def test_int8_v1_counts_are_what_v2_removes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the counter sees v1's many launches and its column buffer (> 24 MB)."""
    rec, y = _count_lsq(monkeypatch, "v1")
    v2, _ = _count_lsq(monkeypatch, "v2")
    assert rec.bytes_moved > 10 * v2.bytes_moved, (rec.bytes_moved, v2.bytes_moved)
    assert len(rec.launches) > 10, rec.launches
    assert "im2col" in rec.launches and "_int_mm" in rec.launches
    assert rec.big_allocations(L2_BYTES, exempt=(y,)), rec.allocations


EDSR_SHAPES = [(16, 64, 48, 48), (1, 64, 256, 256)]


def _meta_edsr_conv(shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Input ``shape`` [N, C, H, W] and an EDSR body conv's C -> C 3x3 weight, on the meta device."""
    n, c, h, w = shape
    return torch.empty(n, c, h, w, device="meta"), torch.empty(c, c, 3, 3, device="meta")


@pytest.mark.parametrize("shape", EDSR_SHAPES)
def test_fp32_forward_keeps_its_column_buffer_in_l2(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...]
) -> None:
    x, w = _meta_edsr_conv(shape)
    b = torch.empty(shape[1], device="meta")
    with launch_count.counting() as (rec, mode), torch.no_grad():
        launch_count.stub_im2col(monkeypatch, ops, rec, mode)
        y = ops._conv2d._init_fn(x, w, b, [1, 1], [1, 1], [1, 1], 1, ops.DEFAULT_WORKSPACE_BYTES)
    cols = [bytes_ for op, bytes_ in rec.allocations if op == "empty"]
    assert cols and max(cols) <= L2_BYTES, rec.allocations
    assert rec.big_allocations(L2_BYTES, exempt=(y,)) == []


@pytest.mark.parametrize("shape", EDSR_SHAPES)
def test_fp32_forward_adds_its_bias_in_the_gemm(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...]
) -> None:
    """The bias rides in the GEMM (a ones row on the columns): per chunk an im2col and a matmul, and no
    pass over the output (``CONVPERF_IM2COL_BIAS=add``, the control, adds one: counted the same way)."""
    x, w = _meta_edsr_conv(shape)
    b = torch.empty(shape[1], device="meta")
    counts = {}
    for variant in ("gemm", "add"):
        monkeypatch.setenv(ops.BIAS_VARIANT_ENV, variant)
        with launch_count.counting() as (rec, mode), torch.no_grad():
            launch_count.stub_im2col(monkeypatch, ops, rec, mode)
            args = (x, w, b, [1, 1], [1, 1], [1, 1], 1, ops.DEFAULT_WORKSPACE_BYTES)
            ops._conv2d._init_fn(*args)  # the first call builds the biased weight matrix (one cat)
            rec.launches.clear()
            rec.traffic.clear()
            y = ops._conv2d._init_fn(*args)
        counts[variant] = (len(rec.launches), rec.bytes_moved)
        chunks = rec.launches.count("im2col")
        assert chunks >= 1 and rec.launches.count("matmul") + rec.launches.count("bmm") >= 1, rec.launches
        if variant == "gemm":
            assert "add" not in rec.launches and "add_" not in rec.launches, rec.launches
    launches, moved = counts["gemm"]
    assert launches == counts["add"][0] - 1, counts
    # The add pass touches the output (counted once per launch); the ones rows cost 1/(K+1) of the columns.
    assert counts["add"][1] - moved >= 0.95 * y.numel() * 4, counts


@pytest.mark.parametrize("shape", EDSR_SHAPES)
def test_fp32_weight_grad_has_no_per_sample_buffer(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...]
) -> None:
    x, w = _meta_edsr_conv(shape)
    with launch_count.counting() as (rec, mode), torch.no_grad():
        launch_count.stub_im2col(monkeypatch, ops, rec, mode)
        monkeypatch.setattr(
            ops,
            "col2im",
            lambda col, shape, *a: torch.empty(shape[0], shape[1], a[-1], shape[3], device="meta"),
        )
        gy = torch.empty_like(x)
        ops._conv2d_backward._init_fn(gy, x, w, [1, 1], [1, 1], [1, 1], 1, ops.DEFAULT_WORKSPACE_BYTES, False)
    assert "sum" not in rec.launches, rec.launches  # the per-sample [nb, C_out, K] products summed
    assert max(b for _, b in rec.allocations if _ == "empty") <= L2_BYTES


def test_sweep_plan_lists_both_int8_variants_and_both_workspaces() -> None:
    from kernels.im2col_gemm import sweep_plan

    cases = sweep_plan.cases()
    assert len({(c.variant, c.problem_id, c.phase) for c in cases}) == len(cases)  # every row once
    tuning = {"lsq_v1", "lsq_v2", "chunk24MiB", "chunk256MiB", "chunk24MiB_bias_add", "implicit"}
    rows = [c for c in cases if c.variant in tuning]  # the new variants against the old
    assert len(rows) == 12 and {c.variant for c in rows} == tuning
    assert all(Conv2dProblem.from_id(c.problem_id).id == c.problem_id for c in cases)
