"""CPU twins of the negative controls, built on the depthwise reference (same defects as controls.cu).

Every function has ``F.conv2d``'s signature (a conv2d candidate). ``noop``, ``wrong_border`` and
``wrong_odd_stride2`` are wrong on some inputs only; ``slowed(fraction)`` returns a correct candidate
that redoes ``fraction`` of the forward work.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kernels._controls.candidate import Candidate, conv2d_candidate
from kernels.conv_args import output_hw
from kernels.depthwise import reference
from kernels.depthwise.reference import DepthwiseArgs


def _noop(a: DepthwiseArgs, weight: torch.Tensor, bias: torch.Tensor | None, groups: int) -> torch.Tensor:
    """A kernel that never ran: a zero output of the right shape, dtype and layout."""
    ho, wo = output_hw(
        (a.input.shape[2], a.input.shape[3]),
        (weight.shape[2], weight.shape[3]),
        a.stride,
        a.padding,
        a.dilation,
    )
    return a.input.new_zeros((a.input.shape[0], a.input.shape[1], ho, wo))


def _wrong_border(
    a: DepthwiseArgs, weight: torch.Tensor, bias: torch.Tensor | None, groups: int
) -> torch.Tensor:
    """Bottom/right padding replicates the edge instead of zeros (a clamped index); top/left are right."""
    ph, pw = a.padding
    x = a.input
    if ph or pw:
        # replicate-pad lacks half kernels on some backends; fp16/bf16 -> fp32 -> back is exact.
        wide = x if x.dtype in (torch.float32, torch.float64) else x.float()
        grown = F.pad(wide, (0, pw, 0, ph), mode="replicate").to(x.dtype)
        x = F.pad(grown, (pw, 0, ph, 0))
    return reference.forward(x, weight, bias, a.stride, 0, a.dilation, groups)


def _wrong_odd_stride2(
    a: DepthwiseArgs, weight: torch.Tensor, bias: torch.Tensor | None, groups: int
) -> torch.Tensor:
    """With stride_w == 2 and an odd input width the last output column is left at zero."""
    out = reference.forward(a.input, weight, bias, a.stride, a.padding, a.dilation, groups)
    if a.stride[1] == 2 and a.input.shape[3] % 2 == 1:
        out = out.clone()
        out[..., -1] = 0
    return out


noop = conv2d_candidate(_noop, "noop")
wrong_border = conv2d_candidate(_wrong_border, "wrong_border")
wrong_odd_stride2 = conv2d_candidate(_wrong_odd_stride2, "wrong_odd_stride2")


def slowed(fraction: float) -> Candidate:
    """A correct candidate that recomputes ``ceil(fraction * C)`` channels once more (forward only)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction} must be in (0, 1]")

    def slowed_forward(
        a: DepthwiseArgs, weight: torch.Tensor, bias: torch.Tensor | None, groups: int
    ) -> torch.Tensor:
        out = reference.forward(a.input, weight, bias, a.stride, a.padding, a.dilation, groups)
        k = max(1, math.ceil(fraction * a.input.shape[1]))
        extra_bias = bias[:k] if bias is not None else None
        with torch.no_grad():
            reference.forward(a.input[:, :k], weight[:k], extra_bias, a.stride, a.padding, a.dilation, k)
        return out

    return conv2d_candidate(slowed_forward, f"slowed_{fraction:g}")
