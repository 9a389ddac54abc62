"""Column buffers in PyTorch ops and the chunked im2col + GEMM loop shared by ops and reference.

``im2col``/``col2im`` mirror the CUDA kernels (same column layouts, row bands and K padding) with
``F.unfold``/``F.fold``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from kernels.conv_args import ConvArgs, geometry
from kernels.im2col_gemm.chunking import plan_chunks

LAYOUTS = ("nkl", "knl", "nlk")

# gemm(wmat [g, cog, K], col [nb, g, K, L]) -> [nb, g, cog, L]
GemmFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _band(
    x: torch.Tensor,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    row_start: int,
    rows: int,
) -> tuple[torch.Tensor, int, int]:
    """Zero-padded input rows that output rows [row_start, row_start + rows) read; (band, top, bottom)."""
    ph, pw = padding
    xp = F.pad(x, (pw, pw, ph, ph))
    top, bottom = _band_rows(kernel, stride, dilation, row_start, rows)
    return xp[:, :, top:bottom], top, bottom


def _band_rows(
    kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int], row_start: int, rows: int
) -> tuple[int, int]:
    """Rows ``[top, bottom)`` of the zero-padded input that output rows [row_start, row_start + rows) read."""
    top = row_start * stride[0]
    bottom = (row_start + rows - 1) * stride[0] + dilation[0] * (kernel[0] - 1) + 1
    return top, bottom


def im2col(
    x: torch.Tensor,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    row_start: int,
    rows: int,
    layout: str = "nkl",
    pad_k_to: int = 1,
    ones_row: bool = False,
) -> torch.Tensor:
    """Column buffer of output rows ``[row_start, row_start + rows)``; layout ``nkl``/``knl``/``nlk``.

    K (= C*kh*kw, ordered channel, ky, kx as ``F.unfold``) is zero-padded to a multiple of ``pad_k_to``;
    ``ones_row`` adds a row of ones after it (before the padding): the row that multiplies a bias
    column appended to the weight matrix, so the GEMM adds the bias.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}")
    band, _, _ = _band(x, kernel, stride, padding, dilation, row_start, rows)
    src = band if band.is_floating_point() else band.float()  # unfold has no integer kernels
    col = F.unfold(src, tuple(kernel), dilation=tuple(dilation), stride=tuple(stride)).to(x.dtype)
    if ones_row:
        col = torch.cat([col, col.new_ones((col.shape[0], 1, col.shape[2]))], 1)
    k = col.shape[1]
    k_total = -(-k // pad_k_to) * pad_k_to
    if k_total != k:
        col = F.pad(col, (0, 0, 0, k_total - k))
    if layout == "knl":
        return col.permute(1, 0, 2).contiguous()
    if layout == "nlk":
        return col.transpose(1, 2).contiguous()
    return col


def col2im(
    col: torch.Tensor,
    input_shape: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    row_start: int,
    rows: int,
    layout: str,
    h_start: int,
    h_rows: int,
) -> torch.Tensor:
    """Adjoint of :func:`im2col`: input rows ``[h_start, h_start + h_rows)`` of the summed columns."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}")
    n, c, h, w = input_shape
    kh, kw = kernel
    if layout == "knl":
        col = col.permute(1, 0, 2)
    elif layout == "nlk":
        col = col.transpose(1, 2)
    col = col[:, : c * kh * kw]
    ph, pw = padding
    top, bottom = _band_rows(kernel, stride, dilation, row_start, rows)
    band = F.fold(
        col, (bottom - top, w + 2 * pw), tuple(kernel), dilation=tuple(dilation), stride=tuple(stride)
    )
    full = col.new_zeros((n, c, h + 2 * ph, w + 2 * pw))
    full[:, :, top:bottom] = band
    return full[:, :, ph + h_start : ph + h_start + h_rows, pw : pw + w].contiguous()


# im2col(x, kernel, stride, padding, dilation, row_start, rows, layout, pad_k_to) -> column buffer
Im2ColFn = Callable[..., torch.Tensor]


def conv_gemm(
    x: torch.Tensor,
    weight: torch.Tensor,
    a: ConvArgs,
    workspace_bytes: int,
    gemm: GemmFn | None = None,
    im2col_fn: Im2ColFn | None = None,
) -> torch.Tensor:
    """Chunked im2col + GEMM without bias, differentiable through the torch ops it calls.

    ``gemm(wmat [g, cog, K], col [nb, g, K, L]) -> [nb, g, cog, L]`` (a dense matmul by default);
    ``im2col_fn`` builds the ``nkl`` column buffer (:func:`im2col` by default).
    """
    n, c, _, _ = x.shape
    cout = weight.shape[0]
    g = a.groups
    kh, kw = a.kernel
    ho, wo, k, cog = geometry(x, weight, a)
    wmat = weight.reshape(g, cog, k)
    fn = gemm if gemm is not None else _dense_gemm
    make_col = im2col_fn if im2col_fn is not None else im2col
    pieces = []
    for ch in plan_chunks(n, ho, wo, c * kh * kw, x.element_size(), workspace_bytes):
        col = make_col(
            x[ch.n0 : ch.n1], a.kernel, a.stride, a.padding, a.dilation, ch.r0, ch.r1 - ch.r0, "nkl", 1
        )
        nb = ch.n1 - ch.n0
        y = fn(wmat, col.view(nb, g, k, -1))
        pieces.append((ch, y.reshape(nb, cout, ch.r1 - ch.r0, wo)))
    if not pieces:
        return x.new_zeros((n, cout, ho, wo)) + weight.sum() * 0  # keeps the graph for empty batches
    if all(ch.r0 == 0 and ch.r1 == ho for ch, _ in pieces):
        return torch.cat([y for _, y in pieces], dim=0)
    rows: dict[int, list[torch.Tensor]] = {}
    for ch, y in pieces:
        rows.setdefault(ch.n0, []).append(y)
    return torch.cat([torch.cat(rows[i], dim=2) for i in sorted(rows)], dim=0)


def _dense_gemm(wmat: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    return torch.matmul(wmat, col)
