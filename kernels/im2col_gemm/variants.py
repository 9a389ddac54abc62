"""LSQ int8 and sparse variants of im2col+GEMM, written once over an ``im2col`` function.

``ops`` passes the CUDA im2col (falling back to the torch-ops one on the CPU), ``reference``
passes the torch-ops one; the GEMMs are torch's (cuBLAS / cuBLASLt int8 / cuSPARSE / cuSPARSELt
on a GPU). Pruning masks and quantization codes are pure functions of the tensors, so the
fp64 oracles in the tests rebuild exactly the same pruned weights and codes. The sparse
variants prune and convert (CSR, semi-structured) once per weight version
(:func:`sparse_weight`), outside the timed call.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernels._weight_cache import WeightCache
from kernels.conv_args import ConvArgs, conv_shape, with_bias
from kernels.im2col_gemm.chunking import plan_chunks
from kernels.im2col_gemm.columns import Im2ColFn, conv_gemm
from kernels.quant import Step, qrange, quantize_codes

PATTERNS = ("2:4", "filter")


# ---- pruning masks ---------------------------------------------------------------------------
def _check_density(density: float) -> None:
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density={density!r} must be in (0, 1] (the fraction of weights kept)")


def magnitude_mask(weight: torch.Tensor, density: float) -> torch.Tensor:
    """Keep the ``round(density * numel)`` (at least 1) largest-magnitude weights of the layer."""
    _check_density(density)
    flat = weight.detach().abs().reshape(-1).float()
    keep = max(1, round(density * flat.numel()))
    order = torch.sort(flat, descending=True, stable=True).indices[:keep]
    mask = torch.zeros_like(flat, dtype=torch.bool)
    mask[order] = True
    return mask.view(weight.shape)


def two_four_mask(weight: torch.Tensor) -> torch.Tensor:
    """2:4 semi-structured mask: in every run of 4 reduction entries of a filter keep the 2 largest."""
    cout = weight.shape[0]
    flat = weight.detach().abs().reshape(cout, -1).float()
    k = flat.shape[1]
    pad = (-k) % 4
    padded = torch.nn.functional.pad(flat, (0, pad), value=-1.0)  # padding is never kept over a weight
    groups = padded.view(cout, -1, 4)
    top = torch.sort(groups, dim=2, descending=True, stable=True).indices[:, :, :2]
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(2, top, True)
    return mask.view(cout, -1)[:, :k].reshape(weight.shape)


def filter_keep(weight: torch.Tensor, groups: int, density: float) -> torch.Tensor:
    """Indices ``[groups, kept]`` (within each group, sorted) of the filters with the largest L2 norm."""
    _check_density(density)
    cout = weight.shape[0]
    cog = cout // groups
    keep = max(1, round(density * cog))
    norms = weight.detach().float().reshape(groups, cog, -1).pow(2).sum(-1)
    idx = torch.sort(norms, dim=1, descending=True, stable=True).indices[:, :keep]
    return torch.sort(idx, dim=1).values


def filter_mask(weight: torch.Tensor, groups: int, density: float) -> torch.Tensor:
    """Boolean mask (weight-shaped) of the filters :func:`filter_keep` keeps."""
    cout = weight.shape[0]
    idx = filter_keep(weight, groups, density)
    keep = torch.zeros(groups, cout // groups, dtype=torch.bool, device=weight.device)
    keep.scatter_(1, idx, True)
    return keep.reshape(cout, 1, 1, 1).expand(weight.shape)


def pruned_weight(weight: torch.Tensor, groups: int, *, kind: str, density: float = 0.5) -> torch.Tensor:
    """The weight the sparse variants compute with: ``kind`` is ``unstructured``, ``2:4`` or ``filter``."""
    if kind == "unstructured":
        mask = magnitude_mask(weight, density)
    elif kind == "2:4":
        mask = two_four_mask(weight)
    elif kind == "filter":
        mask = filter_mask(weight, groups, density)
    else:
        raise ValueError(f"pruning kind {kind!r} must be 'unstructured', '2:4' or 'filter'")
    return weight * mask.to(weight.dtype)


# ---- sparse GEMMs ----------------------------------------------------------------------------
class _SparseMM(torch.autograd.Function):
    """``w_sparse @ col`` with a fixed sparse operand; gradients through the dense masked weight."""

    @staticmethod
    def forward(ctx: Any, w_dense: torch.Tensor, col: torch.Tensor, w_sparse: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(w_dense, col)
        return torch.mm(w_sparse, col) if w_sparse.layout == torch.strided else w_sparse @ col

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        w_dense, col = ctx.saved_tensors
        gw = grad @ col.t() if ctx.needs_input_grad[0] else None
        gc = w_dense.t() @ grad if ctx.needs_input_grad[1] else None
        if gw is not None:
            gw = gw * (w_dense != 0).to(gw.dtype)  # pruned weights stay pruned
        return gw, gc, None


def semi_structured_available(t: torch.Tensor) -> bool:
    """True where PyTorch's 2:4 kernels (cuSPARSELt/CUTLASS, sm_80+) can run on ``t``'s dtype."""
    if not t.is_cuda or t.dtype not in (torch.float16, torch.bfloat16):
        return False
    return torch.cuda.get_device_capability(t.device) >= (8, 0)


TWO_FOUR_SPARSE = "2:4 semi-structured GEMM"
TWO_FOUR_DENSE = "2:4 mask, dense GEMM (cuSPARSELt needs fp16/bf16 on an sm_80+ GPU)"


def two_four_path(t: torch.Tensor) -> str:
    """Which GEMM :func:`two_four_gemm` runs for operands like ``t``: the label reports and facts use.

    fp32 (on a GPU too) and CPU tensors get the 2:4-masked weight times a *dense* GEMM: the
    numbers are the pruned conv's, the speed is not a 2:4 kernel's.
    """
    return TWO_FOUR_SPARSE if semi_structured_available(t) else TWO_FOUR_DENSE


@dataclass(frozen=True)
class SparseWeight:
    """What a sparse variant computes with, derived once per weight (:func:`sparse_weight`).

    ``mask``: weight-shaped bool mask (``unstructured``, ``2:4``; None for ``filter``);
    ``operands``: per group, the CSR matrix (``unstructured``) or the semi-structured tensor of
    the zero-padded weight (``2:4`` where cuSPARSELt runs; empty otherwise); ``keep``: the kept
    filter indices ``[groups, kept]`` (``filter``).
    """

    mask: torch.Tensor | None
    operands: tuple[torch.Tensor, ...] = ()
    keep: torch.Tensor | None = None


# Pruning (a sort) and the CSR conversion (it reads the non-zero count back to the host: a sync,
# and an error under CUDA-graph capture) happen once per weight version, never in the timed call.
_sparse: WeightCache[SparseWeight] = WeightCache(8)


def _pad64(w: torch.Tensor) -> torch.Tensor:
    """Zero-pad a [rows, K] weight to the 2:4 kernels' tile multiples (64)."""
    rows, k = w.shape
    return torch.nn.functional.pad(w, (0, -k % 64, 0, -rows % 64))


def _build_sparse(weight: torch.Tensor, groups: int, kind: str, density: float) -> SparseWeight:
    with torch.no_grad():
        w = weight.detach()
        if kind == "filter":
            return SparseWeight(None, keep=filter_keep(w, groups, density))
        mask = magnitude_mask(w, density) if kind == "unstructured" else two_four_mask(w)
        wmat = (w * mask.to(w.dtype)).reshape(groups, w.shape[0] // groups, -1)
        if kind == "unstructured":
            compute = w.dtype if w.is_cuda else torch.float32  # CPU CSR kernels are fp32/fp64 only
            with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
                warnings.simplefilter("ignore", UserWarning)
                csr = tuple(wmat[g].to(compute).to_sparse_csr() for g in range(groups))
            return SparseWeight(mask, csr)
        if not semi_structured_available(w):
            return SparseWeight(mask)
        from torch.sparse import to_sparse_semi_structured

        return SparseWeight(mask, tuple(to_sparse_semi_structured(_pad64(wmat[g])) for g in range(groups)))


def sparse_weight(weight: torch.Tensor, groups: int, *, kind: str, density: float = 0.5) -> SparseWeight:
    """The pruned forms of ``weight`` for a sparse variant, cached per weight object and version
    (an in-place update of the weight rebuilds them); ``kind``: ``unstructured``, ``2:4``, ``filter``."""
    if kind not in ("unstructured", "2:4", "filter"):
        raise ValueError(f"pruning kind {kind!r} must be 'unstructured', '2:4' or 'filter'")
    if kind != "2:4":
        _check_density(density)
    key = (groups, kind, density if kind != "2:4" else None)
    return _sparse.get(weight, key, lambda: _build_sparse(weight, groups, kind, density))


def _tracked(*tensors: torch.Tensor | None) -> bool:
    """True when autograd records ops on any of ``tensors``: only then does a sparse GEMM need the
    dense masked weight beside its sparse operand (for the weight's gradient)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


# mm(group, w [cog, K] dense, col [Kt, N] row-major) -> [>= cog, N]: one group's sparse GEMM
SparseMM = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]

# 2:4 operands are zero-padded to multiples of 64 (CUTLASS's minimum sparse tile; cuSPARSELt needs
# 16): K by im2col itself (zero rows in the one column buffer), the weight's rows by _pad64.
TWO_FOUR_K_MULTIPLE = 64


def _columns_conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: ConvArgs,
    workspace_bytes: int,
    im2col_fn: Im2ColFn,
    mm: SparseMM,
    *,
    pad_k_to: int = 1,
) -> torch.Tensor:
    """Chunked im2col + a sparse ``W @ cols`` GEMM per group, the column buffer written once.

    The columns are built in the ``knl`` layout, ``[K, nb, L]`` row-major: group ``g``'s rows are the
    GEMM's dense operand ``[K, nb*L]`` as a view (no transpose, ``contiguous()``, cast or reshape
    copy), in the input's dtype (the GEMM's), K zero-padded by im2col to ``pad_k_to`` (the 2:4
    kernels' tile). With groups and K padding, each group's columns are their own im2col (the
    padding is per group). The ``[cog, nb*L]`` result is permuted into its place of the NCHW output
    by one copy, which also adds the bias when no gradient is recorded (``add`` has no autograd with
    ``out=``); otherwise the bias is one in-place pass at the end.
    """
    s = conv_shape(x, weight, a)
    k = s.cg * s.kh * s.kw
    kt = -(-k // pad_k_to) * pad_k_to
    wmat = weight.reshape(s.groups, s.cog, k)
    out = x.new_empty((s.n, s.cout, s.ho, s.wo))
    fold_bias = bias is not None and not _tracked(x, weight, bias)
    per_group = s.groups > 1 and kt != k
    chunks = plan_chunks(s.n, s.ho, s.wo, s.groups * kt, x.element_size(), workspace_bytes)
    if not chunks:
        return with_bias(out.zero_() + weight.sum() * 0, bias)  # keeps the graph for empty batches
    for ch in chunks:
        nb, rows = ch.n1 - ch.n0, ch.r1 - ch.r0
        xs = x[ch.n0 : ch.n1]
        band = (a.kernel, a.stride, a.padding, a.dilation, ch.r0, rows, "knl", pad_k_to)
        shared = None if per_group else im2col_fn(xs, *band)
        for gi in range(s.groups):
            lo, hi = gi * s.cog, (gi + 1) * s.cog
            if shared is None:
                col = im2col_fn(xs[:, gi * s.cg : (gi + 1) * s.cg], *band).view(kt, nb * rows * s.wo)
            else:
                col = shared[gi * kt : (gi + 1) * kt].view(kt, nb * rows * s.wo)
            y = mm(gi, wmat[gi], col)[: s.cog].view(s.cog, nb, rows, s.wo).transpose(0, 1)
            dst = out[ch.n0 : ch.n1, lo:hi, ch.r0 : ch.r1]
            if fold_bias:
                assert bias is not None
                torch.add(y, bias[lo:hi].view(1, -1, 1, 1), out=dst)
            else:
                dst.copy_(y)
    if bias is not None and not fold_bias:
        out.add_(bias.view(1, -1, 1, 1))
    return out


def csr_mm(csr: tuple[torch.Tensor, ...]) -> SparseMM:
    """Unstructured sparse GEMM: the prebuilt CSR weight of each group times the dense columns
    (cuSPARSE SpMM, row-major dense operand). On a CPU with fp16/bf16 inputs both operands are cast to
    fp32 (the CPU CSR kernels' dtype): a CPU-only copy; on a GPU the CSR has the input's dtype."""

    def mm(gi: int, w: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        compute = csr[gi].dtype
        if not _tracked(w, col):
            return (csr[gi] @ col.to(compute)).to(w.dtype)
        out: torch.Tensor = _SparseMM.apply(w.to(compute), col.to(compute), csr[gi])
        return out.to(w.dtype)

    return mm


def two_four_mm(semi: tuple[torch.Tensor, ...]) -> SparseMM:
    """2:4 GEMM with the prebuilt semi-structured weights (padded to 64 x 64 multiples) times columns
    whose K im2col already padded to 64: ``[rows padded, N]``, the caller crops the rows. Without
    semi-structured weights (fp32, a CPU) the 2:4-masked weight times a dense GEMM (see
    :func:`two_four_path`). Make one per call (it keeps that call's padded weights)."""

    padded: dict[int, torch.Tensor] = {}  # one call's padded weights: padded once, not per chunk

    def mm(gi: int, w: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        if not semi:
            return torch.mm(w, col)
        if not _tracked(w, col):  # inference: the semi-structured operand alone, no padded dense copy
            return semi[gi] @ col
        if gi not in padded:
            padded[gi] = _pad64(w)
        out: torch.Tensor = _SparseMM.apply(padded[gi], col, semi[gi])
        return out

    return mm


def sparse_conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    a: ConvArgs,
    workspace_bytes: int,
    im2col_fn: Im2ColFn,
    *,
    density: float,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Unstructured: magnitude-prune to ``density``, then im2col + CSR GEMM (:func:`_columns_conv`).

    The mask and CSR come from :func:`sparse_weight` (built on the first call per weight version);
    a call runs the GEMMs (and, where autograd records, multiplies by the mask so gradients reach
    the kept weights).
    """
    prep = sparse_weight(weight, a.groups, kind="unstructured", density=density)
    assert prep.mask is not None
    # The CSR holds the pruned values; the masked dense weight is only the gradient's path.
    w = weight * prep.mask.to(weight.dtype) if _tracked(x, weight) else weight
    return _columns_conv(x, w, bias, a, workspace_bytes, im2col_fn, csr_mm(prep.operands))


def structured_conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    a: ConvArgs,
    workspace_bytes: int,
    im2col_fn: Im2ColFn,
    *,
    pattern: str,
    density: float,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Structured: ``2:4`` (semi-structured GEMM on a GPU, :func:`_columns_conv`) or ``filter`` (GEMM
    over kept filters only); the mask, semi-structured weights or kept filters come from
    :func:`sparse_weight` (cached)."""
    if pattern == "2:4":
        prep = sparse_weight(weight, a.groups, kind="2:4")
        assert prep.mask is not None
        # The semi-structured operands hold the pruned values; without them (the dense fallback) or
        # for the gradient's path the GEMM needs the masked dense weight.
        masked = _tracked(x, weight) or not prep.operands
        w = weight * prep.mask.to(weight.dtype) if masked else weight
        pad = TWO_FOUR_K_MULTIPLE if prep.operands else 1
        mm = two_four_mm(prep.operands)
        return _columns_conv(x, w, bias, a, workspace_bytes, im2col_fn, mm, pad_k_to=pad)
    if pattern != "filter":
        raise ValueError(f"pattern={pattern!r} must be one of {PATTERNS}")
    idx = sparse_weight(weight, a.groups, kind="filter", density=density).keep  # [g, kept]
    assert idx is not None

    def gemm(wmat: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        kept = torch.gather(wmat, 1, idx.unsqueeze(-1).expand(-1, -1, wmat.shape[2]))
        y = torch.matmul(kept, col)  # [nb, g, kept, L]: the pruned filters cost nothing
        out = y.new_zeros((col.shape[0], wmat.shape[0], wmat.shape[1], col.shape[3]))
        index = idx.view(1, idx.shape[0], idx.shape[1], 1).expand_as(y)
        return out.scatter(2, index, y)

    out = conv_gemm(x, weight, a, workspace_bytes, gemm=gemm, im2col_fn=im2col_fn)
    return with_bias(out, bias)


# ---- LSQ int8 --------------------------------------------------------------------------------
INT_MM_MIN_ROWS = 17  # torch._int_mm needs more than 16 rows in the first operand


def int_gemm(a_codes: torch.Tensor, b_codes_t: torch.Tensor) -> torch.Tensor:
    """Exact int32 ``a [M, K] @ b_t.T`` via ``torch._int_mm`` (cuBLASLt int8 on a GPU).

    ``K`` must already be a multiple of 8; rows of ``a`` and of ``b_t`` are zero-padded to what
    ``_int_mm`` accepts (M > 16, N % 8 == 0) and cropped after.
    """
    m, k = a_codes.shape
    nout = b_codes_t.shape[0]
    if k % 8:
        raise ValueError(f"int_gemm: K={k} must be a multiple of 8 (pad the column buffer)")
    mp = max(m, INT_MM_MIN_ROWS)
    np_ = -(-nout // 8) * 8
    a = torch.nn.functional.pad(a_codes, (0, 0, 0, mp - m)) if mp != m else a_codes
    b = torch.nn.functional.pad(b_codes_t, (0, 0, 0, np_ - nout)) if np_ != nout else b_codes_t
    return torch._int_mm(a.contiguous(), b.contiguous().t())[:m, :nout]


def lsq_accumulate(
    x: torch.Tensor,
    weight: torch.Tensor,
    a: ConvArgs,
    workspace_bytes: int,
    im2col_fn: Im2ColFn,
    *,
    act_step: Step,
    weight_step: Step,
    bits: int,
) -> torch.Tensor:
    """int32 accumulators ``sum(code_x * code_w)`` of the LSQ-quantized conv via int8 GEMMs."""
    qrange(bits)
    xq = quantize_codes(x, act_step, bits)
    wq = quantize_codes(weight, weight_step, bits)
    s = conv_shape(x, weight, a)
    k = s.cg * s.kh * s.kw
    kp = -(-k // 8) * 8
    acc = torch.zeros((s.n, s.cout, s.ho, s.wo), dtype=torch.int32, device=x.device)
    wmats = [
        torch.nn.functional.pad(wq[gi * s.cog : (gi + 1) * s.cog].reshape(s.cog, k), (0, kp - k))
        for gi in range(s.groups)
    ]
    for ch in plan_chunks(s.n, s.ho, s.wo, kp * s.groups, 1, workspace_bytes):
        nb, rows = ch.n1 - ch.n0, ch.r1 - ch.r0
        for gi in range(s.groups):
            xs = xq[ch.n0 : ch.n1, gi * s.cg : (gi + 1) * s.cg].contiguous()
            col = im2col_fn(xs, a.kernel, a.stride, a.padding, a.dilation, ch.r0, rows, "nlk", 8)
            y = int_gemm(col.reshape(nb * rows * s.wo, kp), wmats[gi])  # [nb*L, cog]
            acc[ch.n0 : ch.n1, gi * s.cog : (gi + 1) * s.cog, ch.r0 : ch.r1] = y.view(
                nb, rows, s.wo, s.cog
            ).permute(0, 3, 1, 2)
    return acc
