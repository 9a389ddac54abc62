"""Depthwise conv2d written with PyTorch ops: the CUDA kernel's algorithm, runnable on any device.

``forward`` has the signature and semantics of ``torch.nn.functional.conv2d`` restricted to depthwise
convolutions (``groups == C_in``, channel multiplier 1). It sums, over the kernel taps, strided slices
of the zero-padded input times the per-channel tap weight, accumulating in fp32 for fp16/bf16 like the
kernel does. Autograd differentiates it, so it is also the CPU candidate of the perf suite.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from kernels.depthwise import planted

IntPair = int | tuple[int, int] | list[int]
Padding = IntPair | str


@dataclass(frozen=True)
class DepthwiseArgs:
    """Validated arguments: a 4-D input (pre-padded for asymmetric ``'same'``) and int pairs."""

    input: torch.Tensor
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    unbatched: bool


def _pair(value: IntPair, name: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (int(value[0]), int(value[1]))
    if isinstance(value, (tuple, list)) and len(value) == 1 and isinstance(value[0], int):
        return (int(value[0]), int(value[0]))
    raise ValueError(f"{name}={value!r} must be an int or a pair of ints")


def depthwise_args(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: IntPair,
    padding: Padding,
    dilation: IntPair,
    groups: int,
) -> DepthwiseArgs:
    """Check that the call is a depthwise conv2d and normalise its arguments.

    Raises ``ValueError`` naming the problem: not depthwise (``groups != C_in``), a channel
    multiplier > 1, bad shapes, bad stride/padding/dilation, or ``padding='same'`` with stride > 1.
    """
    if input.dim() not in (3, 4):
        raise ValueError(f"input must be 3-D (C, H, W) or 4-D (N, C, H, W), got shape {tuple(input.shape)}")
    unbatched = input.dim() == 3
    x = input.unsqueeze(0) if unbatched else input
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
    s = _pair(stride, "stride")
    d = _pair(dilation, "dilation")
    if min(s) < 1:
        raise ValueError(f"stride={stride!r} must be >= 1")
    if min(d) < 1:
        raise ValueError(f"dilation={dilation!r} must be >= 1")
    kh, kw = int(weight.shape[2]), int(weight.shape[3])
    if isinstance(padding, str):
        if padding == "valid":
            p = (0, 0)
        elif padding == "same":
            if s != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions (as in F.conv2d)")
            total_h, total_w = d[0] * (kh - 1), d[1] * (kw - 1)
            top, left = total_h // 2, total_w // 2
            if total_h % 2 or total_w % 2:
                # Even effective kernels pad one more on the bottom/right, like F.conv2d.
                x = F.pad(x, (left, total_w - left, top, total_h - top))
                p = (0, 0)
            else:
                p = (top, left)
        else:
            raise ValueError(f"padding={padding!r} must be an int, a pair, 'valid' or 'same'")
    else:
        p = _pair(padding, "padding")
        if min(p) < 0:
            raise ValueError(f"padding={padding!r} must be >= 0")
    h, w = x.shape[2] + 2 * p[0], x.shape[3] + 2 * p[1]
    if h < d[0] * (kh - 1) + 1 or w < d[1] * (kw - 1) + 1:
        raise ValueError(
            f"input {tuple(x.shape[2:])} with padding {p} is smaller than the dilated kernel "
            f"({d[0] * (kh - 1) + 1}, {d[1] * (kw - 1) + 1}); the output would be empty"
        )
    return DepthwiseArgs(x, s, p, d, unbatched)


def output_hw(
    hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> tuple[int, int]:
    """Output height and width of a conv2d (the F.conv2d formula)."""
    return (
        (hw[0] + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1,
        (hw[1] + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1,
    )


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
    planted.extra_work(lambda x: _sum_of_taps(replace(a, input=x), weight, bias), a, weight)  # off by default
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
