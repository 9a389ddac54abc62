"""im2col+GEMM family: chunking, column builders, dense/LSQ/sparse variants vs their fp64 oracles.

CPU tests run ``ops`` with the torch-ops column builders (the chunking, GEMM and custom-op backward
are the same code as on a GPU) and ``reference``; CUDA tests skip without a GPU.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from kernels.conv_args import out_size
from kernels.im2col_gemm import columns, ops, oracles, reference, variants
from kernels.im2col_gemm.chunking import input_rows, plan_chunks
from kernels.quant import lsq_fake_quant, quality, quantize_codes
from perf_tests.fuzz import small_problems
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.correctness_report import ConvMismatch
from pytest_convperf.correctness.oracle import assert_conv_close
from tests.kernels.sanitizer import sanitize, skip_under_sanitizer

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
SMALL = small_problems()
SA, SW = 0.04, 0.01  # LSQ steps bound in the checks (data-independent, so oracle and candidate agree)


# ---- chunking --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "ho", "budget_rows"), [(5, 7, 100), (5, 7, 14), (5, 7, 7), (3, 7, 3), (2, 7, 1)]
)
def test_plan_covers_everything_within_the_bound(n: int, ho: int, budget_rows: int) -> None:
    wo, k, es = 4, 9, 4
    row = k * wo * es
    chunks = plan_chunks(n, ho, wo, k, es, budget_rows * row)
    covered = {(i, r) for c in chunks for i in range(c.n0, c.n1) for r in range(c.r0, c.r1)}
    assert covered == {(i, r) for i in range(n) for r in range(ho)}
    assert sum((c.n1 - c.n0) * (c.r1 - c.r0) for c in chunks) == n * ho  # no overlap
    assert all((c.n1 - c.n0) * (c.r1 - c.r0) * row <= budget_rows * row for c in chunks)


def test_plan_names_the_minimum_workspace() -> None:
    with pytest.raises(ValueError, match=r"raise workspace_bytes to at least 144"):
        plan_chunks(1, 4, 4, 9, 4, 100)
    assert plan_chunks(0, 4, 4, 9, 4, 100) == []


def test_input_rows_are_what_the_band_reads() -> None:
    assert input_rows(0, 3, 10, 3, 1, 1, 1) == (0, 4)
    assert input_rows(2, 4, 10, 3, 2, 0, 2) == (4, 11 - 1)


# ---- column builders ---------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["nkl", "knl", "nlk"])
def test_im2col_band_matches_unfold_and_col2im_is_its_adjoint(layout: str) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 9, 8, generator=gen, dtype=torch.float64)
    k, s, p, d = (3, 2), (2, 1), (1, 2), (1, 2)
    ho = out_size(9, 3, 2, 1, 1)
    full = F.unfold(x, k, dilation=d, padding=p, stride=s)  # [n, K, ho*wo]
    wo = full.shape[2] // ho
    col = columns.im2col(x, k, s, p, d, 1, ho - 2, layout, 8)
    as_nkl = {"nkl": col, "knl": col.permute(1, 0, 2), "nlk": col.transpose(1, 2)}[layout]
    assert as_nkl.shape[1] == 24  # K = 18 padded to a multiple of 8 with zeros
    assert torch.equal(as_nkl[:, :18], full[:, :, wo : (ho - 1) * wo])
    assert not as_nkl[:, 18:].any()
    c = torch.randn(col.shape, generator=gen, dtype=torch.float64)
    lo, hi = input_rows(1, ho - 1, 9, 3, 2, 1, 1)
    dx = columns.col2im(c, x.shape, k, s, p, d, 1, ho - 2, layout, lo, hi - lo)
    lhs = (col * c).sum()  # <im2col(x), c> == <x, col2im(c)>
    rhs = (x[:, :, lo:hi] * dx).sum()
    assert torch.allclose(lhs, rhs, rtol=1e-12)


# ---- dense: reference and ops (custom op, chunked backward) ---------------------------------------
@settings(max_examples=25, deadline=None)
@given(problem=SMALL)
def test_reference_matches_the_oracle(problem: Conv2dProblem) -> None:
    assert_conv_close(reference.forward, problem, backward=True, device="cpu")


@settings(max_examples=25, deadline=None)
@given(problem=SMALL)
def test_ops_forward_and_backward_with_a_tiny_workspace(problem: Conv2dProblem) -> None:
    # One output row of columns: forces batch chunks and row bands in forward and backward.
    row = problem.c_in * problem.kernel[0] * problem.kernel[1] * problem.out_w * 4
    tiny = functools.partial(ops.forward, workspace_bytes=row)
    assert_conv_close(tiny, problem, backward=True, device="cpu")


def test_ops_custom_op_passes_opcheck() -> None:
    x = torch.randn(2, 4, 7, 6, requires_grad=True)
    w = torch.randn(6, 2, 3, 2, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    torch.library.opcheck(ops._conv2d, (x, w, b, [2, 1], [1, 0], [1, 2], 2, 1 << 20))
    torch.library.opcheck(ops._conv2d, (x, w, None, [1, 1], [0, 0], [1, 1], 2, 480))  # row bands


def test_a_broken_candidate_is_caught() -> None:
    problem = Conv2dProblem(n=2, c_in=4, h=8, w=8, c_out=4, kernel=(3, 3), padding=(1, 1))

    def off_by_one_row(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *a: object) -> torch.Tensor:
        out = ops.forward(x, w, b, 1, 1)
        return torch.cat([out[:, :, 1:], out[:, :, -1:]], dim=2)

    with pytest.raises(ConvMismatch):
        assert_conv_close(off_by_one_row, problem, device="cpu")


def test_bad_arguments_name_the_fix() -> None:
    x, w = torch.randn(1, 4, 5, 5), torch.randn(4, 4, 3, 3)
    with pytest.raises(ValueError, match="raise workspace_bytes"):
        ops.forward(x, w, workspace_bytes=16)
    with pytest.raises(ValueError, match="must match"):
        ops.forward(x, w.double())
    with pytest.raises(ValueError, match="groups=3"):
        ops.forward(x, w, groups=3)
    with pytest.raises(ValueError, match="asymmetric"):
        ops.forward(x, torch.randn(4, 4, 2, 2), padding="same")


def test_unbatched_input_and_same_padding() -> None:
    x, w = torch.randn(3, 6, 5), torch.randn(2, 3, 3, 3)
    out = ops.forward(x, w, None, 1, "same")
    assert torch.allclose(out, F.conv2d(x, w, None, 1, "same"), atol=1e-5)


# ---- LSQ int8 ------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(problem=SMALL)
def test_lsq_int_accumulators_are_exact(problem: Conv2dProblem) -> None:
    x, w, _ = problem.make_inputs(seed=1)
    stride, padding, dilation, groups = problem.conv_args()
    acc = ops.lsq_accumulate(
        x, w, stride, padding, dilation, groups, act_step=SA, weight_step=SW, workspace_bytes=1 << 12
    )
    exact = _int64_conv(x, w, problem)
    assert acc.dtype == torch.int32
    assert torch.equal(acc.long(), exact)


def _int64_conv(x: torch.Tensor, w: torch.Tensor, problem: Conv2dProblem) -> torch.Tensor:
    """int64 oracle: unfold the codes and multiply-accumulate in int64 (no float anywhere)."""
    stride, padding, dilation, groups = problem.conv_args()
    xq, wq = quantize_codes(x, SA, 8).long(), quantize_codes(w, SW, 8).long()
    cols = F.unfold(xq.double(), problem.kernel, dilation=dilation, padding=padding, stride=stride).long()
    n, g = problem.n, groups
    cols = cols.view(n, g, -1, cols.shape[-1])
    wm = wq.view(g, problem.c_out // g, -1)
    out = torch.einsum("gok,ngkl->ngol", wm, cols)
    return out.reshape(problem.output_shape)


@settings(max_examples=30, deadline=None)
@given(problem=SMALL)
def test_lsq_variants_match_the_fake_quant_oracle(problem: Conv2dProblem) -> None:
    oracle = functools.partial(oracles.lsq_oracle, act_step=SA, weight_step=SW)
    for fn in (reference.lsq_forward, ops.lsq_forward):
        cand = functools.partial(fn, act_step=SA, weight_step=SW)
        assert_conv_close(cand, problem, oracle=oracle, backward=True, device="cpu")


def test_lsq_is_not_the_float_conv() -> None:
    """The oracle swap matters: against the float conv the quantized output fails."""
    problem = Conv2dProblem(n=2, c_in=8, h=8, w=8, c_out=8, kernel=(3, 3), padding=(1, 1))
    with pytest.raises(ConvMismatch):
        assert_conv_close(
            functools.partial(reference.lsq_forward, act_step=0.25, weight_step=0.05), problem, device="cpu"
        )


def test_lsq_step_gradient_follows_the_paper() -> None:
    x = torch.tensor([0.26, -0.74, 5.0, -9.0])
    step = torch.tensor(0.5, requires_grad=True)
    y = lsq_fake_quant(x, step, 4)  # qn, qp = -8, 7
    (gs,) = torch.autograd.grad(y.sum(), [step])
    v = x / 0.5
    expected = ((torch.round(v) - v)[:2].sum() + 7 + (-8)) / math.sqrt(4 * 7)
    assert gs.item() == pytest.approx(expected.item(), rel=1e-6)


def test_int_gemm_pads_to_what_int_mm_accepts() -> None:
    gen = torch.Generator().manual_seed(3)
    a = torch.randint(-128, 128, (5, 16), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (3, 16), generator=gen, dtype=torch.int8)
    assert torch.equal(variants.int_gemm(a, b).long(), a.long() @ b.long().t())
    with pytest.raises(ValueError, match="multiple of 8"):
        variants.int_gemm(a[:, :12], b[:, :12])


# ---- sparsity --------------------------------------------------------------------------------------
def test_masks_keep_what_they_promise() -> None:
    w = torch.randn(8, 3, 3, 3, generator=torch.Generator().manual_seed(0))
    m = variants.magnitude_mask(w, 0.25)
    assert m.sum().item() == round(0.25 * w.numel())
    assert w.abs()[m].min() >= w.abs()[~m].max()
    m24 = variants.two_four_mask(w).reshape(8, -1)
    full = m24[:, : 27 // 4 * 4].reshape(8, -1, 4)
    assert (full.sum(-1) == 2).all() and (m24[:, 24:].sum(-1) <= 2).all()
    keep = variants.filter_keep(w, 2, 0.5)
    assert keep.shape == (2, 2)
    norms = w.reshape(2, 4, -1).norm(dim=-1)
    for g in range(2):
        assert set(keep[g].tolist()) == set(norms[g].topk(2).indices.tolist())


@settings(max_examples=25, deadline=None)
@given(problem=SMALL)
def test_sparse_variants_match_the_pruned_oracle(problem: Conv2dProblem) -> None:
    cases = [
        (functools.partial(ops.sparse_forward, density=0.3), "unstructured", 0.3),
        (functools.partial(reference.sparse_forward, density=0.3), "unstructured", 0.3),
        (functools.partial(ops.structured_forward, pattern="2:4"), "2:4", 0.5),
        (functools.partial(reference.structured_forward, pattern="filter", density=0.5), "filter", 0.5),
        (functools.partial(ops.structured_forward, pattern="filter", density=0.5), "filter", 0.5),
    ]
    for cand, kind, density in cases:
        oracle = functools.partial(oracles.pruned_oracle, kind=kind, density=density)
        assert_conv_close(cand, problem, oracle=oracle, backward=True, device="cpu")


# ---- quality drift -----------------------------------------------------------------------------------
def test_quality_metrics() -> None:
    f = torch.tensor([3.0, 4.0])
    assert quality(f, f) == {"rel_l2": 0.0, "sqnr_db": math.inf}
    q = quality(f + torch.tensor([0.3, 0.4]), f)  # noise is 10 % of the signal's norm
    assert q["rel_l2"] == pytest.approx(0.1)
    assert q["sqnr_db"] == pytest.approx(20.0)
    with pytest.raises(ValueError, match="shape"):
        quality(f, f[:1])


def test_lsq_drift_shrinks_with_more_bits() -> None:
    x, w, b = Conv2dProblem(n=2, c_in=8, h=10, w=10, c_out=8, kernel=(3, 3), padding=(1, 1)).make_inputs(
        seed=0
    )
    ref = F.conv2d(x, w, b, 1, 1)
    db = [quality(reference.lsq_forward(x, w, b, 1, 1, bits=bits), ref)["sqnr_db"] for bits in (4, 6, 8)]
    assert db[0] < db[1] < db[2]


# ---- CUDA ----------------------------------------------------------------------------------------------
CUDA_PROBLEMS = [
    Conv2dProblem(
        n=3,
        c_in=6,
        h=17,
        w=15,
        c_out=10,
        kernel=(3, 2),
        stride=(2, 1),
        padding=(1, 2),
        dilation=(1, 2),
        groups=2,
    ),
    Conv2dProblem(n=2, c_in=16, h=33, w=31, c_out=32, kernel=(5, 5), padding=(2, 2)),
    Conv2dProblem(n=2, c_in=8, h=9, w=9, c_out=8, kernel=(3, 3), padding=(1, 1), groups=8, bias=False),
]


@needs_cuda
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(
    "problem", [*CUDA_PROBLEMS[:-1], pytest.param(CUDA_PROBLEMS[-1], marks=sanitize("im2col_gemm"))], ids=str
)
def test_cuda_dense_forward_backward(problem: Conv2dProblem, dtype: str) -> None:
    p = problem.replace(dtype=dtype)
    assert_conv_close(ops.forward, p, backward=True, device="cuda")
    row = p.c_in * p.kernel[0] * p.kernel[1] * p.out_w * p.element_size
    assert_conv_close(functools.partial(ops.forward, workspace_bytes=row), p, backward=True, device="cuda")


@needs_cuda
@skip_under_sanitizer
def test_cuda_workspace_bound_holds() -> None:
    problem = Conv2dProblem(n=8, c_in=64, h=64, w=64, c_out=64, kernel=(3, 3), padding=(1, 1))
    x, w, b = problem.make_inputs(seed=0, device="cuda")
    columns = 8 * 64 * 9 * 64 * 64 * 4  # 75 MiB if built at once
    budget = 2 * 1024 * 1024
    with torch.no_grad():  # warm-up: cuBLAS allocates its workspace through the caching allocator once
        del_me = ops.forward(x, w, b, 1, 1, workspace_bytes=budget)
    del del_me
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    with torch.no_grad():
        out = ops.forward(x, w, b, 1, 1, workspace_bytes=budget)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - start - out.numel() * 4
    assert extra <= 2 * budget < columns, f"forward used {extra} B beyond its output with a {budget} B budget"


@needs_cuda
@pytest.mark.parametrize("layout", ["nkl", "knl", "nlk"])
def test_cuda_columns_equal_the_torch_columns(layout: str) -> None:
    x = torch.randn(2, 5, 13, 11, device="cuda")
    args = ((3, 2), (2, 1), (1, 2), (2, 1))
    ho = out_size(13, 3, 2, 1, 2)
    got = ops.im2col(x, *args, 1, ho - 1, layout, 8)
    want = columns.im2col(x, *args, 1, ho - 1, layout, 8)
    assert torch.equal(got, want)
    q = quantize_codes(x, 0.05, 8)
    assert torch.equal(ops.im2col(q, *args, 0, ho, layout, 8), columns.im2col(q, *args, 0, ho, layout, 8))
    lo, hi = input_rows(1, ho, 13, 3, 2, 1, 2)
    c = torch.randn_like(got)
    torch.testing.assert_close(
        ops.col2im(c, x.shape, *args, 1, ho - 1, layout, lo, hi - lo),
        columns.col2im(c, x.shape, *args, 1, ho - 1, layout, lo, hi - lo),
    )


@needs_cuda
def test_cuda_cpp_ops_pass_opcheck() -> None:
    x = torch.randn(2, 4, 9, 7, device="cuda", requires_grad=True)
    ops.im2col(x.detach(), (3, 3), (1, 1), (1, 1), (1, 1), 0, 9)  # loads the library
    torch.library.opcheck(
        torch.ops.convperf_im2col_gemm.im2col, (x, [3, 3], [1, 1], [1, 1], [1, 1], 2, 5, "nkl", 1)
    )
    col = torch.randn(2, 36, 5 * 7, device="cuda")
    torch.library.opcheck(
        torch.ops.convperf_im2col_gemm.col2im,
        (col, [2, 4, 9, 7], [3, 3], [1, 1], [1, 1], [1, 1], 2, 5, "nkl", 1, 8),
    )
    w = torch.randn(6, 4, 3, 3, device="cuda", requires_grad=True)
    torch.library.opcheck(ops._conv2d, (x, w, None, [1, 1], [1, 1], [1, 1], 1, 1 << 20))


@needs_cuda
@pytest.mark.parametrize("problem", CUDA_PROBLEMS, ids=str)
def test_cuda_lsq_int8_is_exact(problem: Conv2dProblem) -> None:
    x, w, _ = problem.make_inputs(seed=2, device="cuda")
    stride, padding, dilation, groups = problem.conv_args()
    acc = ops.lsq_accumulate(x, w, stride, padding, dilation, groups, act_step=SA, weight_step=SW)
    assert torch.equal(acc.long().cpu(), _int64_conv(x.cpu(), w.cpu(), problem))
    oracle = functools.partial(oracles.lsq_oracle, act_step=SA, weight_step=SW)
    cand = functools.partial(ops.lsq_forward, act_step=SA, weight_step=SW)
    assert_conv_close(cand, problem, oracle=oracle, backward=True, device="cuda")


@needs_cuda
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_cuda_sparse_variants(dtype: str) -> None:
    problem = Conv2dProblem(n=2, c_in=32, h=12, w=12, c_out=64, kernel=(3, 3), padding=(1, 1), dtype=dtype)
    for cand, kind in (
        (functools.partial(ops.sparse_forward, density=0.3), "unstructured"),
        (functools.partial(ops.structured_forward, pattern="2:4"), "2:4"),
        (functools.partial(ops.structured_forward, pattern="filter"), "filter"),
    ):
        oracle = functools.partial(
            oracles.pruned_oracle, kind=kind, density=0.3 if kind == "unstructured" else 0.5
        )
        assert_conv_close(cand, problem, oracle=oracle, backward=True, device="cuda")


def test_check_conv_oracle_replaces_the_float_conv() -> None:
    """``oracle=`` judges a variant by its own function; the (float) reference is then not judged."""
    from pytest_convperf.correctness.oracle import check_conv

    problem = Conv2dProblem(n=1, c_in=4, h=6, w=6, c_out=4, kernel=(3, 3), padding=(1, 1))
    cand = functools.partial(reference.lsq_forward, act_step=0.25, weight_step=0.05)
    oracle = functools.partial(oracles.lsq_oracle, act_step=0.25, weight_step=0.05)
    assert not check_conv(cand, problem, device="cpu").ok
    report = check_conv(cand, problem, oracle=oracle, device="cpu")
    assert report.ok and report.reference_ok and report.reference_errors == []


def test_check_records_quality_metrics_in_the_row(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...]
) -> None:
    """``convperf.check(..., oracle=, extra_metrics=)``: the variant passes and the row keeps the drift."""
    import json
    from pathlib import Path

    pytester.syspathinsert(str(Path(__file__).resolve().parents[2]))
    pytester.makeconftest(
        """
        import pytest
        from pytest_convperf.measure.fake import FakeTimer

        @pytest.fixture
        def convperf_timer():
            return FakeTimer({"candidate": 0.5e-3, "reference": 1e-3})
        """
    )
    pytester.makepyfile(
        """
        import functools
        import pytest
        from kernels.im2col_gemm import oracles, reference
        from pytest_convperf.core.problem import Conv2dProblem

        P = Conv2dProblem(n=1, c_in=4, h=6, w=6, c_out=4, kernel=(3, 3), padding=(1, 1))

        @pytest.mark.convperf
        def test_lsq(convperf):
            kw = {"act_step": 0.25, "weight_step": 0.05}
            convperf.check(functools.partial(reference.lsq_forward, **kw), P,
                           oracle=functools.partial(oracles.lsq_oracle, **kw),
                           extra_metrics={"rel_l2": 0.125, "sqnr_db": 18.0})
        """
    )
    report = pytester.path / "report"
    result = pytester.runpytest(
        *plugin_args, "--convperf", f"--convperf-report={report}",
        f"--convperf-baselines={pytester.path / 'baselines'}", "-p", "no:cacheprovider",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    rows = json.loads((report / "rows.json").read_text())
    rows = rows if isinstance(rows, list) else rows.get("rows", [])
    assert [r.get("extra_metrics") for r in rows] == [{"rel_l2": 0.125, "sqnr_db": 18.0}]
