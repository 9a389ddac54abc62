"""PCILT conv in PyTorch ops: quantize, gather table entries, sum (the suite's CPU candidate).

Same algorithm as the CUDA kernels: activation codes index each weight's table and the entries
are summed, never multiplied (the sum is int64 for integer tables, float32 for float ones).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from kernels.conv_args import IntPair, normalize, out_size
from kernels.pcilt.tables import (
    PCILTTables,
    activation_codes,
    build_tables,
    check_bits,
    check_tables,
    default_act_step,
)
from kernels.quant import qrange


def lut_conv(
    codes: torch.Tensor,
    t: PCILTTables,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> torch.Tensor:
    """Sum of table entries: ``out[n, co, p] = sum_k T[co, k, code[n, k, p]]`` (no multiplies)."""
    n, h = codes.shape[0], codes.shape[2]
    cout, cg, kh, kw, nlev = t.tables.shape
    zero = -qrange(t.bits)[0]
    # Padding taps read the zero level, whose entries are exactly 0 (nothing is added).
    padded = F.pad(codes, (padding[1], padding[1], padding[0], padding[0]), value=zero)
    cols = F.unfold(padded.double(), (kh, kw), dilation=tuple(dilation), stride=tuple(stride)).long()
    length = cols.shape[2]
    cog = cout // groups
    k = cg * kh * kw
    cols = cols.view(n, groups, 1, k, length)
    table = t.tables.view(groups, cog, k, nlev)
    acc_dtype = torch.int64 if t.integer else torch.float32
    out = torch.zeros((n, groups, cog, length), dtype=acc_dtype, device=codes.device)
    for kk in range(k):  # one tap at a time keeps the gather's memory at one output's size
        idx = cols[:, :, :, kk, :].expand(n, groups, cog, length)
        tk = table[:, :, kk, :].unsqueeze(0).expand(n, groups, cog, nlev).to(acc_dtype)
        out += torch.gather(tk, 3, idx)
    ho = out_size(h, kh, stride[0], padding[0], dilation[0])
    return out.view(n, cout, ho, length // ho)


def forward(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    *,
    bits: int = 4,
    act_step: float | None = None,
    integer: bool = True,
    weight_step: float | None = None,
    tables: PCILTTables | None = None,
) -> torch.Tensor:
    """PCILT conv2d (signature of ``F.conv2d``; inference only, no gradients).

    ``act_step`` defaults to ``max|x| / (2^(b-1) - 1)`` per call; ``tables`` may be passed prebuilt.
    """
    x, a, unbatched = normalize(input, weight, bias, stride, padding, dilation, groups)
    check_bits(bits)
    if tables is not None:
        check_tables(tables, weight, bits)
    t = tables if tables is not None else build_tables(weight, bits, integer=integer, weight_step=weight_step)
    sx = act_step if act_step is not None else default_act_step(x, bits)
    acc = lut_conv(activation_codes(x, sx, bits), t, a.stride, a.padding, a.dilation, a.groups)
    out = acc_to_output(acc, t, sx, bias)
    out = out.to(input.dtype)
    return out.squeeze(0) if unbatched else out


def output_scale(t: PCILTTables, act_step: float) -> float:
    """What the sums are scaled by: ``s_x * s_w`` for integer tables, ``s_x`` for float ones."""
    return act_step * (t.weight_step if t.integer and t.weight_step is not None else 1.0)


def acc_to_output(
    acc: torch.Tensor, t: PCILTTables, act_step: float, bias: torch.Tensor | None
) -> torch.Tensor:
    """``float32(acc) * float32(scale) + bias`` (the CUDA kernels' epilogue does the same two roundings)."""
    scale = output_scale(t, act_step)
    # A CPU 0-d tensor enters a CUDA kernel as a scalar: no host-device copy.
    out = acc.to(torch.float32) * torch.tensor(scale, dtype=torch.float32)
    if bias is not None:
        out = out + bias.float().view(1, -1, 1, 1)
    return out


def fake_quant_oracle(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    *,
    bits: int = 4,
    act_step: float | None = None,
    integer: bool = True,
    weight_step: float | None = None,
) -> torch.Tensor:
    """The fp64 conv of the dequantized operands PCILT computes with (for correctness checks)."""
    x, a, unbatched = normalize(input, weight, bias, stride, padding, dilation, groups)
    check_bits(bits)
    sx = act_step if act_step is not None else default_act_step(x, bits)
    xq = (activation_codes(x, sx, bits) + qrange(bits)[0]).double() * sx
    if integer:
        t = build_tables(weight, bits, integer=True, weight_step=weight_step)
        assert t.weight_step is not None
        wq = t.tables[..., -qrange(bits)[0] + 1].double() * t.weight_step  # entry of level 1 == q_w
    else:
        wq = weight.detach().double()
    out = F.conv2d(
        xq, wq, bias.double() if bias is not None else None, a.stride, a.padding, a.dilation, a.groups
    )
    return out.squeeze(0) if unbatched else out
