"""LSQ int8 conv as 3 Triton launches: quantize+pack x, quantize+pack w, implicit GEMM on int8 tensor cores.

Why Triton: ``tl.dot`` on int8 operands lowers to the int8 tensor-core instructions (``mma.sync ...
.s8`` on sm_80, ``wgmma ... .s8`` on sm_90) without hand-written ``mma`` code or CUTLASS headers that
would have to travel to a GPU machine without a package index; the same kernel source runs on the CPU
under Triton's interpreter (``InterpretedFunction``), so its int32 accumulators are checked there
against the exact oracle; and ``triton.compile`` emits its PTX/cubin for sm_90 without a GPU, so
``python -m kernels.sass im2col_gemm`` can show its tensor-core instructions.

Layouts (codes in int8, ``CGP`` = channels per group rounded up to 32, the pad holds zeros):
- x codes ``[N, H, W, G, CGP]`` (channels last: a GEMM row's K slice of one tap is contiguous);
- w codes ``[C_out, KH, KW, CGP]`` (= ``[G, COG, KH*KW*CGP]``, K contiguous as int8 MMAs want).
The GEMM is M = N*HO*WO output pixels x N = COG output channels per group, K = KH*KW*CGP, walked
one (tap, channel block) at a time straight from the packed x: no column buffer exists. Its
epilogue writes either the int32 accumulators or ``acc * (s_x * s_w) + bias`` cast to the output
dtype, both in NCHW.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from kernels.conv_args import ConvArgs, conv_shape
from kernels.quant import qrange

K_ALIGN = 32  # int8 MMAs take K in steps of 32
# Launch options of the GEMM (the SASS report compiles the same): 2 warpgroups for a 128-row tile,
# 3 stages of 128x128 int8 A and B tiles = 96 KiB of shared memory.
GEMM_OPTIONS = {"num_warps": 8, "num_stages": 3}
BLOCK_M = 128
INT32_LIMIT = 2**31 - 1
# round-half-even by adding and subtracting 1.5 * 2**23: exact for |v| <= 2**22 (the clamped codes are)
ROUND_MAGIC = tl.constexpr(12582912.0)


def _quantize_pack(  # type: ignore[no-untyped-def]  # Triton reads the annotations: pointers stay bare
    src,
    dst,
    step,
    n_rows,
    c_per_group,
    hw,
    s_row,
    s_c,
    s_p,
    QN: tl.constexpr,
    QP: tl.constexpr,
    G: tl.constexpr,
    CGP: tl.constexpr,
    STEP_PTR: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
) -> None:
    """codes = rhe(clamp(float32(v) * (1/step))) of a [rows, G*cg, hw] tensor into [rows, hw, G, CGP].

    ``step``: the float32 reciprocal by value, or (``STEP_PTR``) a pointer to the 0-d step;
    ``s_row``/``s_c``/``s_p``: element strides of the source's row (n or c_out), channel and pixel.
    """
    row = tl.program_id(2)
    rp = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    rc = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)  # padded channel index over G*CGP
    grp = rc // CGP
    ci = rc % CGP
    c_ok = (ci < c_per_group) & (grp < G)
    p_ok = rp < hw
    if STEP_PTR:  # noqa: SIM108 - a compile-time branch of the kernel
        inv = tl.math.div_rn(1.0, tl.load(step))  # correctly rounded, as torch.reciprocal
    else:
        inv = step  # the host passes the float32 reciprocal
    src_off = row.to(tl.int64) * s_row + (grp * c_per_group + ci)[None, :] * s_c + rp[:, None] * s_p
    v = tl.load(src + src_off, mask=p_ok[:, None] & c_ok[None, :], other=0.0).to(tl.float32)
    v = v * inv
    v = tl.minimum(tl.maximum(v, QN), QP)  # clamp before rounding: same codes, integer bounds
    v = (v + ROUND_MAGIC) - ROUND_MAGIC
    dst_off = (row.to(tl.int64) * hw + rp[:, None]) * (G * CGP) + rc[None, :]
    tl.store(dst + dst_off, v.to(tl.int8), mask=p_ok[:, None] & (rc < G * CGP)[None, :])


def _implicit_gemm(  # type: ignore[no-untyped-def]  # Triton reads the annotations: pointers stay bare
    xq,
    wq,
    out,
    bias,
    s_x,
    s_w,
    n_img,
    h,
    w,
    ho,
    wo,
    cog,
    SH: tl.constexpr,
    SW: tl.constexpr,
    PH: tl.constexpr,
    PW: tl.constexpr,
    DH: tl.constexpr,
    DW: tl.constexpr,
    KH: tl.constexpr,
    KW: tl.constexpr,
    G: tl.constexpr,
    CGP: tl.constexpr,
    STORE_ACC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    STEP_PTR: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
) -> None:
    """One 128-pixel x BLOCK_N-channel tile of group ``program_id(2)``: ``xq`` [N, H, W, G, CGP] and
    ``wq`` [G*COG, KH, KW, CGP] int8 codes; ``out`` [N, G*COG, HO, WO] int32 (``STORE_ACC``) or the
    output dtype; ``s_x``/``s_w`` floats or (``STEP_PTR``) pointers; ``bias`` unused without HAS_BIAS."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    grp = tl.program_id(2)
    hwo = ho * wo
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # output pixel over N*HO*WO
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output channel within the group
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < n_img * hwo
    n_ok = rn < cog
    img = rm // hwo
    pix = rm % hwo
    oy = pix // wo
    ox = pix % wo
    co = grp * cog + rn
    w_rows = co * (KH * KW * CGP)  # 32-bit offsets (the host checks every tensor's size): fewer registers
    acc = tl.full(
        (BLOCK_M, BLOCK_N), 0, tl.int32
    )  # tl.full: tl.zeros is a jit function the interpreter only runs when TRITON_INTERPRET was set at import
    C_STEPS: tl.constexpr = CGP // BLOCK_K
    # One flat loop over (tap, channel block) so the compiler pipelines the loads into the MMAs.
    for step in range(0, KH * KW * C_STEPS):
        tap = step // C_STEPS  # constexpr divisors: multiply-shift, no runtime division
        c0 = (step % C_STEPS) * BLOCK_K
        iy = oy * SH - PH + (tap // KW) * DH
        ix = ox * SW - PW + (tap % KW) * DW
        ok = m_ok & (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
        a_row = ((img * h + iy) * w + ix) * (G * CGP) + grp * CGP + c0
        a = tl.load(xq + a_row[:, None] + rk[None, :], mask=ok[:, None], other=0)
        b = tl.load(wq + w_rows[None, :] + tap * CGP + c0 + rk[:, None], mask=n_ok[None, :], other=0)
        acc = tl.dot(a, b, acc)
    out_off = (img * (G * cog) * hwo + pix)[:, None] + co[None, :] * hwo
    mask = m_ok[:, None] & n_ok[None, :]
    if STORE_ACC:
        tl.store(out + out_off, acc, mask=mask)
    else:
        if STEP_PTR:  # noqa: SIM108 - a compile-time branch of the kernel
            scale = tl.load(s_x) * tl.load(s_w)
        else:
            scale = s_x * s_w
        y = acc.to(tl.float32) * scale
        if HAS_BIAS:
            y = y + tl.load(bias + co, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(out + out_off, y.to(out.dtype.element_ty), mask=mask)


# The same source, compiled (CUDA tensors) or run by Triton's interpreter (CPU tensors).
KERNELS: dict[str, Callable[..., None]] = {"quantize_pack": _quantize_pack, "implicit_gemm": _implicit_gemm}
_compiled: dict[tuple[str, bool], Any] = {}


def kernel(name: str, interpret: bool) -> Any:
    """The jitted kernel ``name``: a ``JITFunction`` for the GPU, an ``InterpretedFunction`` on the CPU."""
    key = (name, interpret)
    if key not in _compiled:
        fn = KERNELS[name]
        _compiled[key] = InterpretedFunction(fn) if interpret else triton.jit(fn)
    return _compiled[key]


def padded_channels(cg: int) -> int:
    return -(-cg // K_ALIGN) * K_ALIGN


def _block_k(cgp: int) -> int:
    return next(b for b in (128, 64, 32) if cgp % b == 0)


def _by_value(step: torch.Tensor, device: torch.device, by_value: bool | None) -> bool:
    """Pass a step as its float value (a CPU step with device tensors: no host-device copy, no sync)
    or as a pointer (a step on the tensors' device, which the kernel reads). ``by_value`` forces one
    (the CPU tests run both)."""
    return step.device != device if by_value is None else by_value


def _step_arg(step: torch.Tensor, device: torch.device, by_value: bool | None) -> tuple[Any, bool]:
    """``(argument, is_pointer)`` of a 0-d float32 step."""
    if _by_value(step, device, by_value):
        return float(step), False
    return step.to(device), True  # already there unless forced (a 4-byte copy, not a kernel)


def _inv_arg(step: torch.Tensor, device: torch.device, by_value: bool | None) -> tuple[Any, bool]:
    """``1/step`` by value (float32 reciprocal, as ``quant.inv_step``), or the step's pointer (the kernel
    divides with ``div_rn``, correctly rounded as well)."""
    if _by_value(step, device, by_value):
        return float(torch.reciprocal(step.float())), False
    return step.to(device), True


def quantize_pack(
    t: torch.Tensor, step: torch.Tensor, bits: int, groups: int, *, by_value: bool | None = None
) -> torch.Tensor:
    """Codes of ``t`` ``[rows, C, H, W]`` (any strides) as ``[rows, H, W, groups, CGP]`` int8."""
    qn, qp = qrange(bits)
    rows, c, h, w = t.shape
    cg = c // groups
    cgp = padded_channels(cg)
    hw = h * w
    out = torch.empty((rows, h, w, groups, cgp), dtype=torch.int8, device=t.device)
    if t.stride(2) != w * t.stride(3):  # pixels must be one strided run (NCHW and channels_last are)
        t = t.contiguous()
    inv, ptr = _inv_arg(step, t.device, by_value)
    block_p, block_c = 64, 32
    grid = (triton.cdiv(hw, block_p), triton.cdiv(groups * cgp, block_c), rows)
    kernel("quantize_pack", t.device.type == "cpu")[grid](
        t, out, inv, rows, cg, hw, t.stride(0), t.stride(1), t.stride(3),
        QN=qn, QP=qp, G=groups, CGP=cgp, STEP_PTR=ptr, BLOCK_P=block_p, BLOCK_C=block_c,
    )  # fmt: skip
    return out


def conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: ConvArgs,
    *,
    act_step: torch.Tensor,
    weight_step: torch.Tensor,
    bits: int,
    accumulate: bool,
    steps_by_value: bool | None = None,
) -> torch.Tensor:
    """int32 accumulators (``accumulate``) or ``acc * s_x * s_w + bias`` in x's dtype, NCHW.

    ``steps_by_value``: None passes the steps as floats when they are not on x's device and as
    pointers when they are; True/False force one way (tests).
    """
    s = conv_shape(x, weight, a)
    cgp = padded_channels(s.cg)
    sizes = {
        "output": s.n * s.cout * s.ho * s.wo,
        "packed input": s.n * s.h * s.w * s.groups * cgp,
        "packed weight": s.cout * s.kh * s.kw * cgp,
    }
    for what, size in sizes.items():
        if size >= INT32_LIMIT:
            raise ValueError(
                f"lsq v2: the {what} has {size} elements, beyond the kernel's 32-bit offsets; split the "
                "batch or use CONVPERF_LSQ_VARIANT=v1"
            )
    by_value = steps_by_value
    if by_value is None and act_step.device != weight_step.device:
        by_value = False  # one step is on the device: the kernels read both through pointers
    xq = quantize_pack(x, act_step, bits, s.groups, by_value=by_value)
    wq = quantize_pack(
        weight, weight_step, bits, 1, by_value=by_value
    )  # [C_out, KH, KW, 1, CGP]: a filter's cg channels
    out = torch.empty(
        (s.n, s.cout, s.ho, s.wo), dtype=torch.int32 if accumulate else x.dtype, device=x.device
    )
    sx, sx_ptr = _step_arg(act_step, x.device, by_value)
    sw, _ = _step_arg(weight_step, x.device, by_value)
    block_m, block_n = BLOCK_M, max(16, min(128, triton.next_power_of_2(s.cog)))
    grid = (triton.cdiv(s.n * s.ho * s.wo, block_m), triton.cdiv(s.cog, block_n), s.groups)
    kernel("implicit_gemm", x.device.type == "cpu")[grid](
        xq, wq, out, bias if bias is not None else out, sx, sw, s.n, s.h, s.w, s.ho, s.wo, s.cog,
        SH=a.stride[0], SW=a.stride[1], PH=a.padding[0], PW=a.padding[1], DH=a.dilation[0], DW=a.dilation[1],
        KH=s.kh, KW=s.kw, G=s.groups, CGP=cgp, STORE_ACC=accumulate, HAS_BIAS=bias is not None,
        STEP_PTR=sx_ptr, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=_block_k(cgp), **GEMM_OPTIONS,
    )  # fmt: skip
    return out


def sass_specs() -> list[tuple[str, Callable[..., None], dict[str, str], dict[str, Any], dict[str, int]]]:
    """What ``python -m kernels.sass im2col_gemm`` compiles: (name, source, signature, constexprs,
    options) of each kernel at the seed problem's configuration (256 channels, 48x48, 3x3, fp16 out).
    A signature entry ``"*i8:16"`` / ``"i32:16"`` marks an argument divisible by 16, as Triton's launcher
    specializes it for the seed problem (aligned allocations, sizes 48 and 256)."""
    q_sig = {"src": "*fp16:16", "dst": "*i8:16", "step": "fp32", "n_rows": "i32:16", "c_per_group": "i32:16"}
    q_sig |= {
        "hw": "i32:16",
        "s_row": "i32:16",
        "s_c": "i32:16",
    }  # s_p == 1: the launcher makes it a constant
    q_const = {
        "s_p": 1,
        "QN": -128,
        "QP": 127,
        "G": 1,
        "CGP": 256,
        "STEP_PTR": False,
        "BLOCK_P": 64,
        "BLOCK_C": 32,
    }
    g_sig = {
        "xq": "*i8:16",
        "wq": "*i8:16",
        "out": "*fp16:16",
        "bias": "*fp16:16",
        "s_x": "fp32",
        "s_w": "fp32",
    }
    g_sig |= {k: "i32:16" for k in ("n_img", "h", "w", "ho", "wo", "cog")}
    g_const = {"SH": 1, "SW": 1, "PH": 1, "PW": 1, "DH": 1, "DW": 1, "KH": 3, "KW": 3, "G": 1, "CGP": 256}
    g_const |= {"STORE_ACC": False, "HAS_BIAS": True, "STEP_PTR": False}
    g_const |= {"BLOCK_M": BLOCK_M, "BLOCK_N": 128, "BLOCK_K": 128}
    return [
        ("quantize_pack", _quantize_pack, q_sig, q_const, {"num_warps": 4}),
        ("implicit_gemm", _implicit_gemm, g_sig, g_const, dict(GEMM_OPTIONS)),
    ]
