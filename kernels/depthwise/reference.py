"""Depthwise conv2d written with PyTorch ops: the CUDA kernel's algorithm, runnable on any device.

``forward`` has the signature and semantics of ``torch.nn.functional.conv2d`` restricted to depthwise
convolutions (``groups == C_in``, channel multiplier 1). It sums, over the kernel taps, strided slices
of the zero-padded input times the per-channel tap weight, accumulating in fp32 for fp16/bf16 like the
kernel does. Autograd differentiates it, so it is also the CPU candidate of the perf suite.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kernels.conv_args import IntPair, Padding, batched, check_output, output_hw, spatial


@dataclass(frozen=True)
class DepthwiseArgs:
    """Validated arguments: a 4-D input (pre-padded for asymmetric ``'same'``) and int pairs."""

    input: torch.Tensor
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    unbatched: bool


def depthwise_args(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: IntPair,
    padding: Padding,
    dilation: IntPair,
    groups: int,
) -> DepthwiseArgs:
    """Check that the call is a depthwise conv2d and normalise its arguments (``kernels.conv_args``).

    Raises ``ValueError`` naming the problem: not depthwise (``groups != C_in``), a channel
    multiplier > 1, bad shapes, bad stride/padding/dilation, or ``padding='same'`` with stride > 1.
    """
    x, unbatched = batched(input)
    c_in = x.shape[1]
    if weight.dim() != 4:
        raise ValueError(f"weight must be 4-D (C_out, 1, kh, kw), got shape {tuple(weight.shape)}")
    if groups != c_in:
        raise ValueError(
            f"not a depthwise conv: groups={groups} but the input has C_in={c_in} channels; this kernel "
            f"needs groups == C_in (use torch.nn.functional.conv2d for dense or grouped convs)"
        )
    if weight.shape[1] != 1:
        raise ValueError(
            f"weight has shape {tuple(weight.shape)}; a depthwise weight is (C_in, 1, kh, kw) "
            "with groups == C_in"
        )
    if weight.shape[0] != c_in:
        if weight.shape[0] % c_in == 0:
            raise ValueError(
                f"channel multiplier {weight.shape[0] // c_in} (C_out={weight.shape[0]}, C_in={c_in}) is not "
                f"supported: only C_out == C_in; use torch.nn.functional.conv2d for multipliers > 1"
            )
        raise ValueError(f"C_out={weight.shape[0]} must equal C_in={c_in} for a depthwise conv")
    if bias is not None and tuple(bias.shape) != (c_in,):
        raise ValueError(f"bias must have shape ({c_in},), got {tuple(bias.shape)}")
    kernel = (int(weight.shape[2]), int(weight.shape[3]))
    s, p, d, pad_input = spatial(stride, padding, dilation, kernel)
    if pad_input is not None:  # even kernels under 'same' pad one more on the bottom/right, like F.conv2d
        x = F.pad(x, pad_input)
    check_output((x.shape[2], x.shape[3]), kernel, p, d)
    return DepthwiseArgs(x, s, p, d, unbatched)


def _accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def forward(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: IntPair = 1,
    padding: Padding = 0,
    dilation: IntPair = 1,
    groups: int = 1,
) -> torch.Tensor:
    """Depthwise conv2d with ``F.conv2d``'s signature, as a sum over taps of shifted strided slices."""
    a = depthwise_args(input, weight, bias, stride, padding, dilation, groups)
    out = _sum_of_taps(a, weight, bias)
    return out.squeeze(0) if a.unbatched else out


def _sum_of_taps(a: DepthwiseArgs, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    x = a.input
    kh, kw = int(weight.shape[2]), int(weight.shape[3])
    ho, wo = output_hw((x.shape[2], x.shape[3]), (kh, kw), a.stride, a.padding, a.dilation)
    acc = _accumulate_dtype(x.dtype)
    xp = F.pad(x.to(acc), (a.padding[1], a.padding[1], a.padding[0], a.padding[0]))
    taps = weight.to(acc)
    channels = x.shape[1]
    out: torch.Tensor | None = None
    for i in range(kh):
        r0 = i * a.dilation[0]
        rows = slice(r0, r0 + (ho - 1) * a.stride[0] + 1, a.stride[0])
        for j in range(kw):
            c0 = j * a.dilation[1]
            cols = slice(c0, c0 + (wo - 1) * a.stride[1] + 1, a.stride[1])
            term = xp[:, :, rows, cols] * taps[:, 0, i, j].view(1, channels, 1, 1)
            out = term if out is None else out + term
    assert out is not None  # kh, kw >= 1
    if bias is not None:
        out = out + bias.to(acc).view(1, channels, 1, 1)
    out = out.to(x.dtype)
    if _is_channels_last(x):
        out = out.contiguous(memory_format=torch.channels_last)
    return out


def _is_channels_last(t: torch.Tensor) -> bool:
    return not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)
