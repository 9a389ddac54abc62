"""Float implicit-GEMM conv2d in one Triton launch: no column buffer, bias in the epilogue.

The GEMM is M = N*HO*WO output pixels x N = C_out/G channels per group, K = C/G * KH * KW, walked
one (tap, channel block) at a time: the A tile is gathered straight from x (any strides, so NCHW
and channels_last alike) with the padding as masked-off loads, the B tile from the weight
``[C_out, C/G, KH, KW]``. fp32 runs ``tl.dot(..., input_precision="ieee")``: plain FMAs on the CUDA
cores, IEEE like cuDNN with TF32 off (fp16/bf16 use the tensor cores with fp32 accumulation). The
output is written NCHW in x's dtype. On CPU tensors the same source runs under Triton's
interpreter (see ``lsq_triton.kernel``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from kernels.conv_args import ConvArgs, conv_shape

INT32_LIMIT = 2**31 - 1
# 128 pixels x 64 channels per CTA (EDSR's 64 output channels in one tile), K in steps of 16.
BLOCK_M, BLOCK_N, BLOCK_K = 128, 64, 16
OPTIONS = {"num_warps": 8, "num_stages": 3}


def _conv_f32(  # type: ignore[no-untyped-def]  # Triton reads the annotations: pointers stay bare
    x,
    w,
    out,
    bias,
    n_img,
    h,
    w_in,
    ho,
    wo,
    cog,
    s_n,
    s_c,
    s_h,
    s_w,
    SH: tl.constexpr,
    SW: tl.constexpr,
    PH: tl.constexpr,
    PW: tl.constexpr,
    DH: tl.constexpr,
    DW: tl.constexpr,
    KH: tl.constexpr,
    KW: tl.constexpr,
    CG: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
) -> None:
    """One BLOCK_M-pixel x BLOCK_N-channel tile of group ``program_id(2)``; ``s_*`` are x's strides."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    grp = tl.program_id(2)
    hwo = ho * wo
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < n_img * hwo
    n_ok = rn < cog
    img = rm // hwo
    pix = rm % hwo
    oy = pix // wo
    ox = pix % wo
    co = grp * cog + rn
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    C_STEPS: tl.constexpr = (CG + BLOCK_K - 1) // BLOCK_K
    for step in range(0, KH * KW * C_STEPS):
        tap = step // C_STEPS  # constexpr divisors only
        c = (step % C_STEPS) * BLOCK_K + rk
        iy = oy * SH - PH + (tap // KW) * DH
        ix = ox * SW - PW + (tap % KW) * DW
        ok = m_ok & (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w_in)
        c_ok = c < CG
        a_off = (img * s_n + iy * s_h + ix * s_w)[:, None] + ((grp * CG + c) * s_c)[None, :]
        a = tl.load(x + a_off, mask=ok[:, None] & c_ok[None, :], other=0.0)
        b_off = (co * (CG * KH * KW))[None, :] + (c * (KH * KW) + tap)[:, None]
        b = tl.load(w + b_off, mask=c_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    if HAS_BIAS:
        acc = acc + tl.load(bias + co, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    out_off = (img * (tl.num_programs(2) * cog) * hwo + pix)[:, None] + (co * hwo)[None, :]
    tl.store(out + out_off, acc.to(out.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


_compiled: dict[bool, Any] = {}


def kernel(interpret: bool) -> Any:
    """The jitted kernel: a ``JITFunction`` for the GPU, an ``InterpretedFunction`` on the CPU."""
    if interpret not in _compiled:
        _compiled[interpret] = InterpretedFunction(_conv_f32) if interpret else triton.jit(_conv_f32)
    return _compiled[interpret]


def conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, a: ConvArgs) -> torch.Tensor:
    """conv2d of a 4-D x (any strides) and a contiguous-able weight, NCHW output in x's dtype."""
    s = conv_shape(x, weight, a)
    if max(x.numel(), s.n * s.cout * s.ho * s.wo, weight.numel()) >= INT32_LIMIT:
        raise ValueError("implicit conv: a tensor exceeds the kernel's 32-bit offsets; split the batch")
    weight = weight.contiguous()
    out = torch.empty((s.n, s.cout, s.ho, s.wo), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(s.n * s.ho * s.wo, BLOCK_M), triton.cdiv(s.cog, BLOCK_N), s.groups)
    kernel(x.device.type == "cpu")[grid](
        x, weight, out, bias if bias is not None else out, s.n, s.h, s.w, s.ho, s.wo, s.cog, *x.stride(),
        SH=a.stride[0], SW=a.stride[1], PH=a.padding[0], PW=a.padding[1], DH=a.dilation[0], DW=a.dilation[1],
        KH=s.kh, KW=s.kw, CG=s.cg, HAS_BIAS=bias is not None, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K, **OPTIONS,
    )  # fmt: skip
    return out


def sass_specs() -> list[tuple[str, Callable[..., None], dict[str, str], dict[str, Any], dict[str, int]]]:
    """The kernel at EDSR's first shape (64 -> 64 channels, 48x48, 3x3, fp32, NCHW); see
    ``lsq_triton.sass_specs`` for the signature notation."""
    sig = {"x": "*fp32:16", "w": "*fp32:16", "out": "*fp32:16", "bias": "*fp32:16"}
    sig |= {k: "i32:16" for k in ("n_img", "h", "w_in", "ho", "wo", "cog", "s_n", "s_c", "s_h")}
    const: dict[str, Any] = {"s_w": 1, "SH": 1, "SW": 1, "PH": 1, "PW": 1, "DH": 1, "DW": 1, "KH": 3, "KW": 3}
    const |= {"CG": 64, "HAS_BIAS": True, "BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K}
    return [("implicit_conv_f32", _conv_f32, sig, const, dict(OPTIONS))]
