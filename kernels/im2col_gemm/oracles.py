"""fp64 oracles of the variants: the conv the variant is meant to compute, exactly.

Quantization and pruning error is by design, so a variant is checked against the float64 conv
of its own quantized (fake-quant) or pruned operands, not against the float conv; the drift
from the float conv is measured separately (:func:`kernels.quant.quality`). Quantization codes
are computed from the float32 values exactly as the variants do; gradients pass straight through
(inside the clamp range) as in LSQ.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from kernels.conv_args import normalize
from kernels.im2col_gemm.variants import pruned_weight
from kernels.quant import inv_step, qrange, quantize_codes, step_tensor

IntPair = int | Sequence[int]


def _ste(t: torch.Tensor, step: float, bits: int) -> torch.Tensor:
    """``codes * step`` in float64 with LSQ's straight-through gradient (1 inside the range)."""
    qn, qp = qrange(bits)
    codes = quantize_codes(t, step, bits).to(torch.float64)
    v = t.detach().float() * inv_step(step)
    inside = ((v >= qn) & (v <= qp)).to(torch.float64)
    t64 = t.to(torch.float64)
    value = codes * float(step_tensor(step))  # the float32 step the variants scale with
    return t64 * inside + (value - t64 * inside).detach()


def lsq_oracle(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    *,
    act_step: float,
    weight_step: float,
    bits: int = 8,
) -> torch.Tensor:
    """fp64 conv of the LSQ-dequantized operands ``q(x) * s_x``, ``q(w) * s_w`` (plus bias)."""
    b = bias.to(torch.float64) if bias is not None else None
    return F.conv2d(
        _ste(input, act_step, bits), _ste(weight, weight_step, bits), b, stride, padding, dilation, groups
    )


def pruned_oracle(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    *,
    kind: str = "unstructured",
    density: float = 0.5,
) -> torch.Tensor:
    """fp64 conv with the weight pruned as the sparse variants prune it (``kind``: see ``pruned_weight``)."""
    normalize(input, weight, bias, stride, padding, dilation, groups)
    w = pruned_weight(weight.to(torch.float64), groups, kind=kind, density=density)
    b = bias.to(torch.float64) if bias is not None else None
    return F.conv2d(input.to(torch.float64), w, b, stride, padding, dilation, groups)
