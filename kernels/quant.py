"""Quantization helpers shared by the im2col+GEMM (LSQ) and PCILT families, and quality metrics.

Codes are computed as ``round(clamp(x * inv_step))`` in float32 with ``inv_step`` the float32
reciprocal of the step: one correctly rounded multiply, so the CPU reference, the GPU path and the
fp64 oracle (which quantizes the same float32 values) agree code for code. Division by a Python
scalar is avoided on purpose: PyTorch's CUDA kernels may turn it into a multiply by the reciprocal,
which rounds differently near .5 boundaries.
"""

from __future__ import annotations

import math
from typing import Any

import torch

Step = float | torch.Tensor


def qrange(bits: int) -> tuple[int, int]:
    """Signed integer range ``(qn, qp)`` of a ``bits``-bit symmetric quantizer, e.g. (-128, 127)."""
    if not isinstance(bits, int) or isinstance(bits, bool) or not 2 <= bits <= 8:
        raise ValueError(f"bits={bits!r} must be an int in 2..8 (codes are stored in int8)")
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def lsq_init_step(t: torch.Tensor, bits: int) -> float:
    """LSQ's initial step ``2 * mean|t| / sqrt(qp)`` (Esser et al. 2020), as a Python float."""
    _, qp = qrange(bits)
    mean = float(t.detach().float().abs().mean()) if t.numel() else 0.0
    step = 2.0 * mean / math.sqrt(qp)
    return step if step > 0.0 else 1.0


def _step_value(step: float) -> float:
    value = float(step)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"quantization step {value!r} must be a finite number > 0")
    return value


def step_tensor(step: Step) -> torch.Tensor:
    """The step as a 0-d float32 tensor: a Python float becomes a CPU tensor (rounded to float32).

    CPU 0-d tensors enter CUDA kernels as scalars, so no host-device copy or sync is needed (which
    keeps the quantized paths capturable in CUDA graphs).
    """
    if isinstance(step, torch.Tensor):
        return step.detach().float().reshape(())
    return torch.tensor(_step_value(step), dtype=torch.float32)


def inv_step(step: Step) -> torch.Tensor:
    """``1 / step`` as a correctly rounded float32 division (0-d, on the step's device)."""
    return torch.reciprocal(step_tensor(step))


def quantize_codes(t: torch.Tensor, step: Step, bits: int) -> torch.Tensor:
    """Integer codes (int8) of ``t``: ``round_half_even(clamp(float32(t) * inv_step, qn, qp))``."""
    qn, qp = qrange(bits)
    scaled = t.detach().float() * inv_step(step)
    return torch.round(scaled).clamp_(qn, qp).to(torch.int8)


class _LSQQuantize(torch.autograd.Function):
    """Fake quantization with LSQ's gradients: straight-through for x, the LSQ rule for the step."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, step: torch.Tensor, bits: int) -> torch.Tensor:
        qn, qp = qrange(bits)
        v = x.detach().float() * inv_step(step)
        q = torch.round(v).clamp_(qn, qp)
        ctx.save_for_backward(v, q)
        ctx.bounds = (qn, qp)
        ctx.numel = x.numel()
        ctx.step_dtype = step.dtype
        ctx.step_device = step.device
        return q * step.detach().float().reshape(())

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        v, q = ctx.saved_tensors
        qn, qp = ctx.bounds
        inside = (v >= qn) & (v <= qp)
        gx = grad * inside.to(grad.dtype) if ctx.needs_input_grad[0] else None
        gs = None
        if ctx.needs_input_grad[1]:
            # d(q*s)/ds = q - v inside the range, the clamp bound outside; scaled by 1/sqrt(N*qp).
            ds = torch.where(inside, q - v, q)
            scale = 1.0 / math.sqrt(max(1, ctx.numel) * qp)
            gs = (
                (grad.float() * ds)
                .sum()
                .mul(scale)
                .to(device=ctx.step_device, dtype=ctx.step_dtype)
                .reshape(())
            )
        return gx, gs, None


def lsq_fake_quant(t: torch.Tensor, step: Step, bits: int) -> torch.Tensor:
    """``codes * step`` in float32, differentiable in ``t`` and (when a tensor) in ``step`` (LSQ)."""
    qrange(bits)
    s = step if isinstance(step, torch.Tensor) else step_tensor(step)
    out: torch.Tensor = _LSQQuantize.apply(t, s, bits)
    return out


def quality(candidate_out: torch.Tensor, float_out: torch.Tensor) -> dict[str, float]:
    """Drift of a quantized/sparse output from the float conv: relative L2 error and SQNR in dB.

    ``rel_l2 = ||c - f|| / ||f||`` and ``sqnr_db = 10 log10(||f||^2 / ||c - f||^2)`` (inf when equal).
    """
    if tuple(candidate_out.shape) != tuple(float_out.shape):
        raise ValueError(
            f"quality: candidate shape {tuple(candidate_out.shape)} differs from the float output's "
            f"{tuple(float_out.shape)}"
        )
    c = candidate_out.detach().to(torch.float64)
    f = float_out.detach().to(device=c.device, dtype=torch.float64)
    signal = float(f.pow(2).sum())
    noise = float((c - f).pow(2).sum())
    if signal == 0.0:
        return {
            "rel_l2": 0.0 if noise == 0.0 else math.inf,
            "sqnr_db": math.inf if noise == 0.0 else -math.inf,
        }
    rel = math.sqrt(noise / signal)
    sqnr = math.inf if noise == 0.0 else 10.0 * math.log10(signal / noise)
    return {"rel_l2": rel, "sqnr_db": sqnr}
