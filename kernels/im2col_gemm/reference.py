"""The im2col+GEMM family in PyTorch ops: runs anywhere, the suite's CPU candidate.

Same algorithms as :mod:`kernels.im2col_gemm.ops` (chunked column buffer, GEMM per group), with
``F.unfold`` as im2col and autograd through the torch ops. Variants:

- :func:`lsq_forward`: LSQ fake quantization of activations and weights (``bits``, default 8), float GEMM;
- :func:`lsq_accumulate`: the int32 accumulators of the same quantized conv (int8 GEMM);
- :func:`sparse_forward`: magnitude pruning to ``density``, CSR sparse GEMM;
- :func:`structured_forward`: ``pattern="2:4"`` (masked GEMM here) or ``"filter"`` (kept filters only).
"""

from __future__ import annotations

import torch

from kernels.conv_args import ConvArgs, conv2d_entry, with_bias
from kernels.im2col_gemm import variants
from kernels.im2col_gemm.chunking import DEFAULT_WORKSPACE_BYTES
from kernels.im2col_gemm.columns import col2im, conv_gemm, im2col
from kernels.quant import Step, lsq_fake_quant, lsq_init_step


def _forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: ConvArgs,
    *,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """conv2d as chunked ``F.unfold`` + ``matmul`` (signature of ``F.conv2d``; differentiable)."""
    return with_bias(conv_gemm(x, weight, a, workspace_bytes), bias)


def _lsq_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: ConvArgs,
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
    sx = act_step if act_step is not None else lsq_init_step(x, bits)
    sw = weight_step if weight_step is not None else lsq_init_step(weight, bits)
    out = conv_gemm(lsq_fake_quant(x, sx, bits), lsq_fake_quant(weight, sw, bits), a, workspace_bytes)
    return with_bias(out, None if bias is None else bias.float()).to(x.dtype)


def _lsq_accumulate(
    x: torch.Tensor,
    weight: torch.Tensor,
    a: ConvArgs,
    *,
    act_step: Step,
    weight_step: Step,
    bits: int = 8,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """int32 accumulators of the quantized conv (``torch._int_mm`` on the torch-ops columns)."""
    return variants.lsq_accumulate(
        x, weight, a, workspace_bytes, im2col, act_step=act_step, weight_step=weight_step, bits=bits
    )


def _sparse_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: ConvArgs,
    *,
    density: float = 0.5,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """Unstructured sparse conv: keep the ``density`` largest-magnitude weights, CSR GEMM."""
    return variants.sparse_conv(x, weight, a, workspace_bytes, im2col, density=density, bias=bias)


def _structured_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: ConvArgs,
    *,
    pattern: str = "2:4",
    density: float = 0.5,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """Structured sparse conv: ``pattern="2:4"`` or ``"filter"`` (keep ``density`` of the filters)."""
    return variants.structured_conv(
        x, weight, a, workspace_bytes, im2col, pattern=pattern, density=density, bias=bias
    )


# The public functions: ``F.conv2d``'s signature plus each body's keyword options (``conv2d_entry``).
forward = conv2d_entry(_forward)
lsq_forward = conv2d_entry(_lsq_forward)
lsq_accumulate = conv2d_entry(_lsq_accumulate, takes_bias=False)
sparse_forward = conv2d_entry(_sparse_forward)
structured_forward = conv2d_entry(_structured_forward)


__all__ = [
    "col2im",
    "forward",
    "im2col",
    "lsq_accumulate",
    "lsq_forward",
    "sparse_forward",
    "structured_forward",
]
