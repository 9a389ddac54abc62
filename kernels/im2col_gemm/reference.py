"""The im2col+GEMM family in PyTorch ops: runs anywhere, the suite's CPU candidate.

Same algorithms as :mod:`kernels.im2col_gemm.ops` (chunked column buffer, GEMM per group), with
``F.unfold`` as im2col and autograd through the torch ops. Variants:

- :func:`lsq_forward`: LSQ fake quantization of activations and weights (``bits``, default 8), float GEMM;
- :func:`lsq_accumulate`: the int32 accumulators of the same quantized conv (int8 GEMM);
- :func:`sparse_forward`: magnitude pruning to ``density``, CSR sparse GEMM;
- :func:`structured_forward`: ``pattern="2:4"`` (masked GEMM here) or ``"filter"`` (kept filters only).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernels.im2col_gemm import variants
from kernels.im2col_gemm.chunking import DEFAULT_WORKSPACE_BYTES
from kernels.im2col_gemm.columns import col2im, conv_gemm, im2col
from kernels.im2col_gemm.conv_args import normalize
from kernels.quant import Step, lsq_fake_quant, lsq_init_step

IntPair = int | Sequence[int]


def forward(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    *,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """conv2d as chunked ``F.unfold`` + ``matmul`` (signature of ``F.conv2d``; differentiable)."""
    x, a, unbatched = normalize(input, weight, bias, stride, padding, dilation, groups)
    out = conv_gemm(x, weight, a, workspace_bytes)
    if bias is not None:
        out = out + bias.view(1, -1, 1, 1)
    return out.squeeze(0) if unbatched else out


def lsq_forward(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    *,
    act_step: Step | None = None,
    weight_step: Step | None = None,
    bits: int = 8,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """LSQ-quantized conv by fake quantization: ``conv(q(x) * s_x, q(w) * s_w) + bias`` in fp32.

    Steps default to LSQ's initialization from the data; pass tensors to learn them (LSQ gradients).
    The output has the input's dtype.
    """
    x, a, unbatched = normalize(input, weight, bias, stride, padding, dilation, groups)
    sx = act_step if act_step is not None else lsq_init_step(x, bits)
    sw = weight_step if weight_step is not None else lsq_init_step(weight, bits)
    out = conv_gemm(lsq_fake_quant(x, sx, bits), lsq_fake_quant(weight, sw, bits), a, workspace_bytes)
    if bias is not None:
        out = out + bias.float().view(1, -1, 1, 1)
    out = out.to(input.dtype)
    return out.squeeze(0) if unbatched else out


def lsq_accumulate(
    input: torch.Tensor,
    weight: torch.Tensor,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    *,
    act_step: Step,
    weight_step: Step,
    bits: int = 8,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """int32 accumulators of the quantized conv (``torch._int_mm`` on the torch-ops columns)."""
    x, a, unbatched = normalize(input, weight, None, stride, padding, dilation, groups)
    acc = variants.lsq_accumulate(
        x, weight, a, workspace_bytes, im2col, act_step=act_step, weight_step=weight_step, bits=bits
    )
    return acc.squeeze(0) if unbatched else acc


def sparse_forward(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    *,
    density: float = 0.5,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """Unstructured sparse conv: keep the ``density`` largest-magnitude weights, CSR GEMM."""
    x, a, unbatched = normalize(input, weight, bias, stride, padding, dilation, groups)
    out = variants.sparse_conv(x, weight, a, workspace_bytes, im2col, density=density)
    if bias is not None:
        out = out + bias.view(1, -1, 1, 1)
    return out.squeeze(0) if unbatched else out


def structured_forward(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    *,
    pattern: str = "2:4",
    density: float = 0.5,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """Structured sparse conv: ``pattern="2:4"`` or ``"filter"`` (keep ``density`` of the filters)."""
    x, a, unbatched = normalize(input, weight, bias, stride, padding, dilation, groups)
    out = variants.structured_conv(x, weight, a, workspace_bytes, im2col, pattern=pattern, density=density)
    if bias is not None:
        out = out + bias.view(1, -1, 1, 1)
    return out.squeeze(0) if unbatched else out


__all__ = [
    "col2im",
    "forward",
    "im2col",
    "lsq_accumulate",
    "lsq_forward",
    "sparse_forward",
    "structured_forward",
]
