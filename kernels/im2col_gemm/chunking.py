"""How the column buffer is cut so its size stays under ``workspace_bytes`` (pure, no torch)."""

from __future__ import annotations

from typing import NamedTuple

# 24 MiB: the column buffer of a chunk stays in an H100's 50 MB L2 (with room for the GEMM's other
# operands), so im2col's writes are read back by the GEMM from L2 instead of a round trip through HBM.
DEFAULT_WORKSPACE_BYTES = 24 * 1024 * 1024


class Chunk(NamedTuple):
    """Samples ``[n0, n1)`` and output rows ``[r0, r1)`` whose columns are built at once."""

    n0: int
    n1: int
    r0: int
    r1: int


def plan_chunks(
    n: int, ho: int, wo: int, k_total: int, element_size: int, workspace_bytes: int
) -> list[Chunk]:
    """Chunks covering ``n`` samples x ``ho`` output rows, each column buffer <= ``workspace_bytes``.

    Whole samples are grouped while one sample's columns (``k_total * ho * wo`` elements) fit;
    a sample larger than the bound is cut into bands of output rows. Raises ``ValueError`` when
    not even one output row fits.
    """
    if workspace_bytes < 1:
        raise ValueError(f"workspace_bytes={workspace_bytes} must be >= 1")
    if n == 0 or ho == 0 or wo == 0:
        return []
    row_bytes = k_total * wo * element_size
    if row_bytes > workspace_bytes:
        raise ValueError(
            f"workspace_bytes={workspace_bytes} is smaller than one output row of the column buffer "
            f"({k_total} x {wo} elements x {element_size} B = {row_bytes} B); raise workspace_bytes to at "
            f"least {row_bytes}"
        )
    sample_bytes = row_bytes * ho
    if sample_bytes <= workspace_bytes:
        per = max(1, workspace_bytes // sample_bytes)
        return [Chunk(n0, min(n, n0 + per), 0, ho) for n0 in range(0, n, per)]
    rows = workspace_bytes // row_bytes
    return [Chunk(i, i + 1, r0, min(ho, r0 + rows)) for i in range(n) for r0 in range(0, ho, rows)]


def input_rows(r0: int, r1: int, h: int, kh: int, sh: int, ph: int, dh: int) -> tuple[int, int]:
    """Input rows ``[lo, hi)`` read by output rows ``[r0, r1)`` (clipped to the image)."""
    lo = max(0, r0 * sh - ph)
    hi = min(h, (r1 - 1) * sh - ph + dh * (kh - 1) + 1)
    return lo, max(lo, hi)
