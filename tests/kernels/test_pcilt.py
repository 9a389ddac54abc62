"""PCILT: tables, the lookup conv (reference and CUDA) exact against integer oracles, cache, memory."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.pcilt import ops, reference, sweep_plan
from kernels.pcilt.tables import (
    PCILTTables,
    activation_codes,
    build_tables,
    default_act_step,
    levels,
    memory_report,
    pack_codes,
)
from kernels.quant import qrange
from perf_tests.fuzz import small_problems
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.correctness_report import ConvMismatch
from pytest_convperf.correctness.oracle import assert_conv_close
from tests.kernels.sanitizer import sanitize

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
SMALL = small_problems(bias=(True, False))
BITS = st.sampled_from([2, 4, 8])
ACT_STEP = 0.3  # bound in the checks so the oracle quantizes exactly as the candidate


def int_oracle(x: torch.Tensor, w: torch.Tensor, problem: Conv2dProblem, bits: int) -> torch.Tensor:
    """Exact integer conv of the activation and weight codes (float64 is exact at these sizes)."""
    t = build_tables(w, bits)
    qw = t.tables[..., -qrange(bits)[0] + 1]  # the entry of level 1 is the weight code
    qx = activation_codes(x, ACT_STEP, bits) + qrange(bits)[0]
    return F.conv2d(qx.double(), qw.double(), None, *problem.conv_args()).long()


def test_tables_hold_products_with_every_level() -> None:
    w = torch.randn(4, 2, 3, 3)
    for bits in (2, 4, 8):
        t = build_tables(w, bits)
        assert t.tables.shape == (4, 2, 3, 3, 1 << bits) and t.tables.dtype == torch.int32
        q = t.tables[..., -qrange(bits)[0] + 1]
        assert torch.equal(t.tables, q.unsqueeze(-1) * levels(bits).to(torch.int32))
        assert not t.tables[..., -qrange(bits)[0]].any()  # the zero level (padding) adds nothing
        f = build_tables(w, bits, integer=False)
        assert torch.equal(f.tables, w.unsqueeze(-1) * levels(bits).float())
        mem = memory_report(w, bits)
        assert mem == {"weight_bytes": w.numel() * 4, "table_bytes": w.numel() * (1 << bits) * 4}
        assert mem["table_bytes"] == t.table_bytes


def test_pack_codes_layout() -> None:
    codes = torch.tensor([[[[1, 2, 3, 0, 1, 2, 3, 0, 3]]]])
    words = pack_codes(codes, 2)
    assert words.shape == (1, 1, 1, 1)
    assert words.item() == sum(int(c) << (2 * i) for i, c in enumerate(codes.flatten().tolist()))
    eight = pack_codes(torch.tensor([[[[255, 0, 0, 128, 7]]]]), 8)
    assert eight.flatten().tolist() == [255 | (128 << 24) - (1 << 32), 7]


@settings(max_examples=25, deadline=None)
@given(problem=SMALL, bits=BITS)
def test_reference_sums_are_exact(problem: Conv2dProblem, bits: int) -> None:
    x, w, _ = problem.make_inputs(seed=3)
    t = build_tables(w, bits)
    acc = reference.lut_conv(
        activation_codes(x, ACT_STEP, bits),
        t,
        problem.stride,
        problem.padding,
        problem.dilation,
        problem.groups,
    )
    assert acc.dtype == torch.int64
    assert torch.equal(acc, int_oracle(x, w, problem, bits))


@settings(max_examples=20, deadline=None)
@given(problem=SMALL, bits=BITS, integer=st.booleans())
def test_reference_matches_the_fake_quant_oracle(problem: Conv2dProblem, bits: int, integer: bool) -> None:
    kw: dict[str, Any] = {"bits": bits, "act_step": ACT_STEP, "integer": integer}
    cand = functools.partial(reference.forward, **kw)
    assert_conv_close(
        cand, problem, oracle=functools.partial(reference.fake_quant_oracle, **kw), device="cpu"
    )


def test_a_wrong_table_is_caught() -> None:
    problem = Conv2dProblem(n=1, c_in=4, h=8, w=8, c_out=4, kernel=(3, 3), padding=(1, 1))
    kw: dict[str, Any] = {"bits": 4, "act_step": ACT_STEP}

    def off_by_one_level(
        x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *a: object
    ) -> torch.Tensor:
        t = build_tables(w, 4)
        shifted = type(t)(torch.roll(t.tables, 1, dims=-1), t.bits, t.integer, t.weight_step)
        return reference.forward(x, w, b, *a, tables=shifted, **kw)  # type: ignore[arg-type]

    oracle = functools.partial(reference.fake_quant_oracle, **kw)
    with pytest.raises(ConvMismatch):
        assert_conv_close(off_by_one_level, problem, oracle=oracle, device="cpu")


def test_default_act_step_and_errors() -> None:
    x = torch.tensor([[[[-2.0, 1.0]]]])
    assert default_act_step(x, 4) == pytest.approx(2.0 / 7)
    with pytest.raises(ValueError, match="bits=3"):
        reference.forward(x, torch.ones(1, 1, 1, 1), bits=3)
    with pytest.raises(ValueError, match=r"reference\.forward"):
        ops.lut_accumulate(x, build_tables(torch.ones(1, 1, 1, 1), 4), act_step=0.5)
    with pytest.raises(RuntimeError, match="inference"):
        ops.forward(x.requires_grad_(), torch.ones(1, 1, 1, 1))


def test_table_cache_rebuilds_only_when_the_weight_changes() -> None:
    ops.clear_cache()
    w = torch.randn(3, 2, 3, 3)
    t1 = ops.build_tables(w, 4)
    assert ops.build_tables(w, 4) is t1
    assert ops.build_tables(w, 2) is not t1
    w.mul_(2)  # bumps the version counter
    t2 = ops.build_tables(w, 4)
    assert (t2 is not t1 and not torch.equal(t2.tables, t1.tables)) or t2.weight_step != t1.weight_step
    w2 = w.clone()
    assert ops.build_tables(w2, 4) is not t2


# ---- CUDA ------------------------------------------------------------------------------------------
CUDA_PROBLEMS = [
    Conv2dProblem(n=2, c_in=8, h=21, w=19, c_out=16, kernel=(3, 3), padding=(1, 1)),
    Conv2dProblem(
        n=1,
        c_in=6,
        h=17,
        w=35,
        c_out=10,
        kernel=(3, 2),
        stride=(2, 1),
        padding=(1, 2),
        dilation=(1, 2),
        groups=2,
    ),
    Conv2dProblem(n=2, c_in=16, h=33, w=33, c_out=16, kernel=(5, 5), padding=(2, 2), groups=16),
    Conv2dProblem(n=1, c_in=3, h=9, w=9, c_out=5, kernel=(7, 7), padding=(3, 3), bias=False),
]


@needs_cuda
@pytest.mark.parametrize("variant", ops.TILED_VARIANTS)
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize(
    "problem", [*CUDA_PROBLEMS[:-1], pytest.param(CUDA_PROBLEMS[-1], marks=sanitize("pcilt"))], ids=str
)
def test_cuda_kernels_are_exact(
    monkeypatch: pytest.MonkeyPatch, problem: Conv2dProblem, bits: int, variant: str
) -> None:
    """Every kernel against the exact integer oracle; ``variant``: the tiled kernel (v2 where it applies:
    the first problem's 16 output channels, the groups problem's 5 a group and, at 2/4 bits, the 7x7
    one's 5 take it; the rest run v1)."""
    monkeypatch.setenv(ops.TILED_VARIANT_ENV, variant)
    x, w, _ = problem.make_inputs(seed=5, device="cuda")
    packed = ops.quantize_pack(x, ACT_STEP, bits)
    assert torch.equal(packed.cpu(), pack_codes(activation_codes(x.cpu(), ACT_STEP, bits), bits))
    t = ops.build_tables(w, bits)
    want = int_oracle(x.cpu(), w.cpu(), problem, bits)
    for naive in (False, True):
        acc = ops.lut_accumulate(x, t, *problem.conv_args(), act_step=ACT_STEP, naive=naive)
        assert acc.dtype == torch.int32
        assert torch.equal(acc.long().cpu(), want), f"naive={naive}"
    b = torch.randn(problem.c_out, device="cuda")
    for integer in (True, False):
        kw: dict[str, Any] = {"bits": bits, "act_step": ACT_STEP, "integer": integer}
        oracle = functools.partial(reference.fake_quant_oracle, **kw)
        for fn in (ops.forward, ops.naive_forward, ops.prepacked_forward):
            assert_conv_close(functools.partial(fn, **kw), problem, oracle=oracle, device="cuda")
        if integer:  # same sums, same two roundings in the fused epilogue: bit-identical to the reference
            got = ops.forward(x, w, b, *problem.conv_args(), **kw)
            want = reference.forward(x.cpu(), w.cpu(), b.cpu(), *problem.conv_args(), **kw)
            assert torch.equal(got.cpu(), want)


@needs_cuda
def test_cuda_ops_pass_opcheck() -> None:
    x = torch.randn(2, 4, 9, 13, device="cuda")
    ops.quantize_pack(x, 0.1, 4)
    torch.library.opcheck(torch.ops.convperf_pcilt.quantize_pack, (x, 10.0, 4))
    t = ops.build_tables(torch.randn(6, 2, 3, 3, device="cuda"), 4)
    packed = ops.quantize_pack(x, 0.1, 4)
    torch.library.opcheck(
        torch.ops.convperf_pcilt.lut_conv, (packed, t.tables, 13, [1, 1], [1, 1], [1, 1], 2, 4, False)
    )
    bias = torch.randn(6, device="cuda")
    torch.library.opcheck(
        torch.ops.convperf_pcilt.lut_conv,
        (packed, t.tables, 13, [2, 1], [1, 0], [1, 2], 2, 4, True, 0.01, bias),
    )


@needs_cuda
def test_cuda_packed_inputs_are_cached_per_input_version() -> None:
    x = torch.randn(1, 4, 8, 8, device="cuda")
    p1 = ops.packed_input(x, 0.1, 4)
    assert ops.packed_input(x, 0.1, 4) is p1
    x.add_(1.0)
    p2 = ops.packed_input(x, 0.1, 4)
    assert p2 is not p1 and not torch.equal(p1, p2)


def test_prebuilt_tables_must_match_the_weight() -> None:
    x = torch.randn(1, 2, 5, 5)
    w = torch.randn(3, 2, 3, 3)
    other = build_tables(torch.randn(4, 2, 3, 3), 4)
    with pytest.raises(ValueError, match="do not match the weight"):
        reference.forward(x, w, tables=other, bits=4)
    with pytest.raises(ValueError, match="bits=4"):
        reference.forward(x, w, tables=build_tables(w, 2), bits=4)
    with pytest.raises(ValueError, match="do not match the weight"):
        ops.forward(x, w, tables=other, bits=4)
    assert reference.forward(x, w, tables=build_tables(w, 4), bits=4).shape == (1, 3, 3, 3)


# ---- launches and bytes per call (CPU, meta tensors) ------------------------------------------------
def _count_depthwise(monkeypatch: pytest.MonkeyPatch, problem: Conv2dProblem, *, prepacked: bool) -> Any:
    """The second of two ``ops.forward`` calls on one meta input (packing cached after the first when
    ``prepacked``): its launches and the bytes each reads and writes."""
    from tests.kernels import launch_count

    x, w, b = (t.to("meta") if t is not None else None for t in problem.make_inputs(seed=0))
    assert x is not None and w is not None
    t = build_tables(torch.zeros(w.shape), 4)  # only the tables' shape and dtype matter on meta
    tables = PCILTTables(t.tables.to("meta"), t.bits, t.integer, t.weight_step)
    ops.clear_cache()
    kw: dict[str, Any] = {"bits": 4, "act_step": ACT_STEP, "tables": tables, "prepacked": prepacked}
    with launch_count.counting() as (rec, _mode), torch.no_grad():
        stub = launch_count.OpsStub(
            rec, {"quantize_pack": ops.quantize_pack_fake, "lut_conv": ops.lut_conv_fake}
        )
        monkeypatch.setattr(ops, "_cuda_ops", stub)
        ops.forward(x, w, b, *problem.conv_args(), **kw)
        rec.launches.clear()
        rec.traffic.clear()
        out = ops.forward(x, w, b, *problem.conv_args(), **kw)
    ops.clear_cache()
    return rec, x, w, b, out


@pytest.mark.parametrize("problem", sweep_plan.DEPTHWISE, ids=str)
def test_depthwise_call_launches_and_bytes(monkeypatch: pytest.MonkeyPatch, problem: Conv2dProblem) -> None:
    """Packed 4-bit inputs: one launch, reading 1/8 of the fp32 input's bytes; the fp32 depthwise kernel
    moves x + w + b + y. The fp32 output dominates both: PCILT moves 4.5 bytes a pixel to fp32's 8
    (0.5625x, a 1.78x ceiling if both run at the same bandwidth); packing per call adds a launch that
    reads x and writes the codes."""
    rec, x, w, b, out = _count_depthwise(monkeypatch, problem, prepacked=True)
    assert rec.launches == ["lut_conv"], rec.launches
    fp32 = sum(t.numel() * t.element_size() for t in (x, w, b, out))
    ratio = rec.bytes_moved / fp32
    assert rec.bytes_moved == sweep_plan.depthwise_bytes(problem, packed=True), "the sweep plan's byte model"
    assert fp32 == sweep_plan.depthwise_bytes(problem, packed=False)
    print(f"{problem}: PCILT {rec.bytes_moved} B, fp32 depthwise {fp32} B, {ratio:.4f}x")
    assert 0.5625 <= ratio < 0.57, f"PCILT moves {rec.bytes_moved} B, fp32 depthwise {fp32} B: {ratio:.4f}x"
    rec, x, *_ = _count_depthwise(monkeypatch, problem, prepacked=False)
    assert rec.launches == ["quantize_pack", "lut_conv"], rec.launches
    assert rec.traffic[0] == x.numel() * 4 + x.numel() // 2  # fp32 in, 4-bit codes out
