"""The sparse im2col+GEMM variants write their column buffer once and never copy it (issue 28).

Counted on meta tensors at the int8 seed size in fp16 (``launch_count``: the CUDA im2col stubbed to a
record of its launch and buffer). The sparse operands (cuSPARSE CSR, cuSPARSELt 2:4) cannot exist on
meta, so :class:`FakeSparse` stands in for them: ``operand @ dense`` records one launch that reads the
dense operand and allocates the ``[rows, N]`` result, as the library call does. What the count proves
is the plumbing around the library GEMM: no transpose, ``contiguous()``, cast, pad or reshape copy of
the column buffer, and the output written once. Unverified without a GPU: that cuSPARSELt and cuSPARSE
take the row-major ``[K, N]`` operand without an internal copy (documented as accepted layouts).

The 2:4 path with its K padding, groups and bias is also run for values on the CPU, with the
semi-structured operand replaced by the dense padded pruned weight, against the fp64 pruned oracle.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch

from kernels.im2col_gemm import ops, oracles, variants
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.oracle import assert_conv_close
from tests.kernels import launch_count

SEED = Conv2dProblem(n=16, c_in=256, h=48, w=48, c_out=256, kernel=(3, 3), padding=(1, 1), dtype="fp16")
# One chunk's column buffer at the seed size: 2 samples (24 MiB workspace) x K 2304 x L 2304 x 2 B.
COL_BYTES = 2 * 2304 * 2304 * 2
CHUNKS = 8


class FakeSparse:
    """A sparse weight operand on meta: ``self @ dense`` is one recorded library launch."""

    layout = torch.sparse_csr

    def __init__(self, rows: int, dtype: torch.dtype) -> None:
        self.rows = rows
        self.dtype = dtype
        self.rec = launch_count.Record()  # the counting record, set once counting starts

    def __matmul__(self, dense: torch.Tensor) -> torch.Tensor:
        out = torch.empty(self.rows, dense.shape[1], dtype=dense.dtype, device=dense.device)
        self.rec.launches.append("sparse_mm")
        self.rec.traffic.append(launch_count._nbytes([dense, out]))
        return out


def _count(monkeypatch: pytest.MonkeyPatch, kind: str) -> tuple[launch_count.Record, torch.Tensor]:
    p = SEED
    x = torch.empty(p.n, p.c_in, p.h, p.w, dtype=torch.float16, device="meta")
    w = torch.empty(p.c_out, p.c_in, 3, 3, dtype=torch.float16, device="meta")
    b = torch.empty(p.c_out, dtype=torch.float16, device="meta")
    operand = FakeSparse(p.c_out, w.dtype)
    mask = torch.ones(w.shape, dtype=torch.bool, device="meta")
    prep = variants.SparseWeight(mask, (operand,))  # type: ignore[arg-type]  # a stand-in operand
    monkeypatch.setattr(variants, "sparse_weight", lambda *args, **kwargs: prep)  # built outside the count
    with launch_count.counting() as (rec, mode), torch.no_grad():
        operand.rec = rec
        launch_count.stub_im2col(monkeypatch, ops, rec, mode)
        if kind == "unstructured":
            y = ops.sparse_forward(x, w, b, 1, 1, density=0.5)
        else:
            y = ops.structured_forward(x, w, b, 1, 1, pattern="2:4")
    return rec, y


@pytest.mark.parametrize("kind", ["unstructured", "2:4"])
def test_the_column_buffer_is_written_once_and_never_copied(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    rec, y = _count(monkeypatch, kind)
    assert rec.launches.count("im2col") == CHUNKS, rec.launches
    assert rec.launches.count("sparse_mm") == CHUNKS, rec.launches
    # At most one column-buffer-sized allocation per chunk: the im2col's own (the output is exempt).
    big = rec.big_allocations(COL_BYTES // 2, exempt=(y,))
    assert big == [("empty", COL_BYTES)] * CHUNKS, big
    # No launch but the im2col that writes it and the GEMM that reads it touches a column buffer.
    others = [
        (op, moved)
        for op, moved in zip(rec.launches, rec.traffic, strict=True)
        if op not in ("im2col", "sparse_mm") and moved >= COL_BYTES
    ]
    assert others == [], others
    # Per chunk: the columns, the GEMM, one copy of its result into the NCHW output that adds the bias.
    # No mask multiply or weight padding: without autograd the sparse operand alone holds the values.
    assert rec.launches == ["im2col", "sparse_mm", "add"] * CHUNKS, rec.launches
    # The call moves the columns twice (im2col writes, the GEMM reads), the input once and the output
    # three times (the GEMM writes it, the copy reads and writes it), plus the bias per chunk.
    out_bytes = y.numel() * y.element_size()
    x_bytes = SEED.n * SEED.c_in * SEED.h * SEED.w * 2
    bias_bytes = SEED.c_out * 2
    assert rec.bytes_moved == CHUNKS * (2 * COL_BYTES + bias_bytes) + x_bytes + 3 * out_bytes, rec.traffic


@pytest.mark.parametrize("groups", [1, 2])
def test_two_four_on_padded_columns_matches_the_pruned_oracle(
    monkeypatch: pytest.MonkeyPatch, groups: int
) -> None:
    """The semi-structured GEMM path (K padded to 64 by im2col, rows of the weight to 64, the result
    cropped) for values: the sparse operand is the dense padded pruned weight (a strided ``mm``)."""
    monkeypatch.setattr(variants, "semi_structured_available", lambda t: True)
    monkeypatch.setattr("torch.sparse.to_sparse_semi_structured", lambda t: t.clone())
    variants._sparse.clear()
    problem = Conv2dProblem(
        n=3, c_in=6, h=7, w=9, c_out=4, kernel=(3, 3), padding=(1, 1), groups=groups, bias=True
    )
    cand = functools.partial(ops.structured_forward, pattern="2:4", workspace_bytes=6 * 64 * 9 * 4 * 2)
    oracle = functools.partial(oracles.pruned_oracle, kind="2:4")
    try:
        assert_conv_close(cand, problem, oracle=oracle, backward=True, device="cpu")
        _check_inference(cand, oracle, problem)  # the untracked path: the sparse operand alone
    finally:
        variants._sparse.clear()


def test_csr_inference_matches_the_pruned_oracle() -> None:
    problem = Conv2dProblem(n=3, c_in=6, h=7, w=9, c_out=4, kernel=(3, 3), padding=(1, 1), groups=2)
    cand = functools.partial(ops.sparse_forward, density=0.3, workspace_bytes=6 * 27 * 9 * 4)
    _check_inference(
        cand, functools.partial(oracles.pruned_oracle, kind="unstructured", density=0.3), problem
    )


def _check_inference(
    cand: Callable[..., torch.Tensor], oracle: Callable[..., torch.Tensor], p: Conv2dProblem
) -> None:
    """``cand`` under ``no_grad`` (bias folded into the output copy) against the fp64 oracle."""
    x, w, b = p.make_inputs(seed=1, device="cpu")
    with torch.no_grad():
        got = cand(x, w, b, *p.conv_args())
    want = oracle(x, w, b, *p.conv_args())
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
