"""``convperf_edsr::sep_conv``: the fused depthwise-separable EDSR conv as a torch custom op.

The op is defined in ``binding.cpp`` (CUDA, fp32, forward only). This module builds it through
``kernels._build.load("edsr")`` on first call and then adds a fake (meta) implementation and an
autograd formula. The backward does not use a fused kernel: it recomputes the depthwise and
pointwise outputs with ``F.conv2d`` and applies ``aten.convolution_backward`` (the gradient of the
reference composition), so only the forward is ours.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.nn.functional as F

from kernels import _build

OP_NAME = "convperf_edsr::sep_conv"
_lock = threading.Lock()
_registered = False


def _fake(
    x: torch.Tensor,
    dw_weight: torch.Tensor,
    dw_bias: torch.Tensor,
    pw_weight: torch.Tensor,
    pw_bias: torch.Tensor,
    residual: torch.Tensor | None,
    res_scale: float,
    relu: bool,
) -> torch.Tensor:
    return x.new_empty(x.shape)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, dw_weight, dw_bias, pw_weight, pw_bias, residual, res_scale, relu = inputs
    ctx.save_for_backward(x, dw_weight, dw_bias, pw_weight, pw_bias)
    ctx.has_residual = residual is not None
    ctx.res_scale = float(res_scale)
    ctx.relu = bool(relu)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    x, dw_weight, dw_bias, pw_weight, pw_bias = ctx.saved_tensors
    c = x.shape[1]
    z = F.conv2d(x, dw_weight, dw_bias, 1, 1, 1, c)
    grad_v = grad * ctx.res_scale if ctx.has_residual else grad
    if ctx.relu:
        u = F.conv2d(z, pw_weight, pw_bias)
        grad_u = torch.where(u > 0, grad_v, torch.zeros_like(grad_v))
    else:
        grad_u = grad_v
    conv_bwd = torch.ops.aten.convolution_backward.default
    gz, gwp, gbp = conv_bwd(
        grad_u, z, pw_weight, [c], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True]
    )
    gx, gwd, gbd = conv_bwd(
        gz, x, dw_weight, [c], [1, 1], [1, 1], [1, 1], False, [0, 0], c, [True, True, True]
    )
    grad_res = grad if ctx.has_residual else None
    return gx, gwd, gbd, gwp, gbp, grad_res, None, None


def load() -> None:
    """Build (once per source hash) and load the extension, then register fake and autograd."""
    global _registered, OP_NAME
    if _registered:
        return
    with _lock:
        if _registered:
            return
        _build.load("edsr")
        OP_NAME = f"{_build.namespace('edsr')}::sep_conv"  # a revision's copy has its own
        torch.library.register_fake(OP_NAME)(_fake)
        torch.library.register_autograd(OP_NAME, _backward, setup_context=_setup_context)
        _registered = True


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
    """Fused ``[residual + res_scale *] [relu](pw1x1(dw3x3(x)))`` on a CUDA device (fp32).

    Same contract as :func:`kernels.edsr.reference.sep_conv`; C must be 16, 32 or 64.
    """
    if not x.is_cuda:
        raise ValueError(
            f"kernels.edsr.ops.sep_conv runs on CUDA tensors; x is on {x.device}. "
            "Use kernels.edsr.reference.sep_conv on a CPU."
        )
    load()
    out: torch.Tensor = getattr(torch.ops, _build.namespace("edsr")).sep_conv(
        x, dw_weight, dw_bias, pw_weight, pw_bias, residual, float(res_scale), bool(relu)
    )
    return out
