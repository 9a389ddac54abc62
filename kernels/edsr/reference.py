"""The fused depthwise-separable conv of ``edsr.cu`` in PyTorch ops (runs on any device).

Same algorithm as the CUDA kernel, step for step: depthwise 3x3 with its bias, then the pointwise
product accumulated over the input channels, then the pointwise bias, ReLU and the scaled
residual, in the kernel's order. What the kernel does differently is where the depthwise output
lives (shared memory, chunk by chunk, never HBM), which changes speed, not the function; the
summation order of the pointwise product is the kernel's (sequential over input channels) only up
to the backend's GEMM order, inside the fp32 tolerance. The suite's CPU candidate.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def check_shapes(
    x: torch.Tensor,
    dw_weight: torch.Tensor,
    dw_bias: torch.Tensor,
    pw_weight: torch.Tensor,
    pw_bias: torch.Tensor,
    residual: torch.Tensor | None,
) -> None:
    """Raise ``ValueError`` naming the argument when shapes do not form a width-keeping block."""
    if x.dim() != 4:
        raise ValueError(f"sep_conv: x must be (N, C, H, W), got shape {tuple(x.shape)}")
    c = x.shape[1]
    if c < 1:
        raise ValueError(f"sep_conv: x has {c} channels; the block needs C >= 1")
    expected = {
        "dw_weight": ((c, 1, 3, 3), dw_weight),
        "dw_bias": ((c,), dw_bias),
        "pw_weight": ((c, c, 1, 1), pw_weight),
        "pw_bias": ((c,), pw_bias),
    }
    for name, (shape, tensor) in expected.items():
        if tuple(tensor.shape) != shape:
            raise ValueError(
                f"sep_conv: {name} must have shape {shape} for C={c} (a depthwise 3x3 then a C->C "
                f"pointwise conv, both with bias), got {tuple(tensor.shape)}"
            )
    if residual is not None and residual.shape != x.shape:
        raise ValueError(
            f"sep_conv: residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}"
        )


def sep_conv(
    x: torch.Tensor,
    dw_weight: torch.Tensor,
    dw_bias: torch.Tensor,
    pw_weight: torch.Tensor,
    pw_bias: torch.Tensor,
    residual: torch.Tensor | None = None,
    res_scale: float = 1.0,
    relu: bool = False,
) -> torch.Tensor:
    """``[residual + res_scale *] [relu](pw1x1(dw3x3(x, padding 1)))`` with both biases.

    Differentiable (plain PyTorch ops), so a CPU model trains through it.
    """
    check_shapes(x, dw_weight, dw_bias, pw_weight, pw_bias, residual)
    c = x.shape[1]
    z = F.conv2d(x, dw_weight, dw_bias, 1, 1, 1, c)
    acc = F.conv2d(z, pw_weight) + pw_bias.reshape(1, c, 1, 1)
    out = torch.relu(acc) if relu else acc
    if residual is not None:
        out = residual + res_scale * out
    return out


def sep_conv_unfused(
    x: torch.Tensor,
    dw_weight: torch.Tensor,
    dw_bias: torch.Tensor,
    pw_weight: torch.Tensor,
    pw_bias: torch.Tensor,
    residual: torch.Tensor | None = None,
    res_scale: float = 1.0,
    relu: bool = False,
) -> torch.Tensor:
    """The stock PyTorch composition (two ``F.conv2d`` calls and elementwise ops): the baseline."""
    check_shapes(x, dw_weight, dw_bias, pw_weight, pw_bias, residual)
    out = F.conv2d(F.conv2d(x, dw_weight, dw_bias, 1, 1, 1, x.shape[1]), pw_weight, pw_bias)
    if relu:
        out = torch.relu(out)
    if residual is not None:
        out = residual + res_scale * out
    return out
