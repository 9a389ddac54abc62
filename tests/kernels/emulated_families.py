"""Drivers for every kernel family's emulated entry points, and the oracles each is compared with.

Each ``run_*`` takes an :class:`~tests.kernels.cuda_emulation.Emulation` (plain or sanitized), lays out the
buffers exactly as the family's ``ops.py`` hands them to the launcher, fills outputs with a sentinel (NaN,
or a value no correct kernel writes) so an element a kernel forgets cannot pass, and returns the outputs.
Each ``check_*`` runs a case and compares it with the fp64 oracle, or the exact integer oracle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from kernels._controls import cpu as controls_cpu
from kernels.edsr import reference as edsr_ref
from kernels.im2col_gemm import columns
from kernels.pcilt import ops as pcilt_ops
from kernels.pcilt import reference as pcilt_ref
from kernels.pcilt import tables as pcilt_tables
from kernels.quant import inv_step, qrange
from tests.kernels.cuda_emulation import DTYPE_CODES, Emulation, geometry

Pair = tuple[int, int]


def assert_close_fp64(out: torch.Tensor, ref: torch.Tensor, terms: int, what: str) -> None:
    """``out`` (any float dtype) against an fp64 ``ref``, to a few roundings of its dtype per sqrt(terms)."""
    eps = torch.finfo(out.dtype).eps
    tol = 4 * eps * math.sqrt(max(terms, 1)) + eps
    assert not torch.isnan(out).any(), f"{what}: elements left unwritten (NaN sentinel)"
    torch.testing.assert_close(out.double(), ref.double(), rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")


def misaligned(x: torch.Tensor) -> torch.Tensor:
    """The same values (any dense layout) one element past a 16-byte boundary (a dense view, offset 1):
    what the vector kernels' alignment checks must send to their scalar fallbacks."""
    flat = torch.empty(x.numel() + 1, dtype=x.dtype)
    out = flat[1:].as_strided(x.shape, x.stride())
    out.copy_(x)
    return out


# ---- im2col_gemm ---------------------------------------------------------------------------------
I2C_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int8: 3}


def col_strides(layout: str, n: int, k_total: int, length: int) -> tuple[int, int, int]:
    """(sn, sk, sl) of the column layouts (see im2col_gemm.cu)."""
    return {
        "nkl": (k_total * length, length, 1),
        "knl": (length, n * length, 1),
        "nlk": (length * k_total, 1, k_total),
    }[layout]


def col_shape(layout: str, n: int, k_total: int, length: int) -> tuple[int, int, int]:
    return {"nkl": (n, k_total, length), "knl": (k_total, n, length), "nlk": (n, length, k_total)}[layout]


def _i2c_ints(x_shape: Sequence[int], k: Pair, s: Pair, p: Pair, d: Pair, row0: int, rows: int) -> list[int]:
    n, c, h, w = x_shape
    wo = geometry((n, c, h, w), k, s, p, d)[5]
    return [n, c, h, w, k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1], wo, row0, rows]


def check_im2col(emu: Emulation, x: torch.Tensor, k: Pair, s: Pair, p: Pair, d: Pair, row0: int, rows: int,
                 layout: str, pad_k_to: int = 1, ones_row: bool = False) -> None:  # fmt: skip
    """im2col of a row band against ``columns.im2col`` (a copy: exact); padded K rows stay untouched;
    ``ones_row``: the row after C*kh*kw holds ones (the fused bias's row)."""
    n, c = x.shape[0], x.shape[1]
    g = _i2c_ints(x.shape, k, s, p, d, row0, rows)
    length = rows * g[12]
    kk = c * k[0] * k[1] + int(ones_row)
    k_total = -(-kk // pad_k_to) * pad_k_to
    sentinel = -128 if x.dtype == torch.int8 else float("nan")
    col = torch.full(col_shape(layout, n, k_total, length), sentinel, dtype=x.dtype)
    err = emu.call(
        "im2col",
        [x.contiguous(), col],
        [I2C_DTYPES[x.dtype], *g, *col_strides(layout, n, k_total, length), int(ones_row)],
    )
    assert err == 0, f"launch_im2col returned cudaError {err}"
    ref = columns.im2col(x, k, s, p, d, row0, rows, layout, pad_k_to, ones_row)
    pad = [slice(None)] * 3
    pad[{"nkl": 1, "knl": 0, "nlk": 2}[layout]] = slice(kk, None)
    written, expect = col.clone(), ref.clone()
    untouched = written[tuple(pad)]
    assert (untouched.isnan() if x.is_floating_point() else untouched == -128).all(), "im2col wrote K padding"
    written[tuple(pad)] = 0
    assert torch.equal(written, expect), f"im2col {layout} differs from columns.im2col"


def check_col2im(emu: Emulation, x_shape: Sequence[int], dtype: torch.dtype, k: Pair, s: Pair, p: Pair,
                 d: Pair, row0: int, rows: int, layout: str, h0: int, hs: int,
                 seed: int = 0) -> None:  # fmt: skip
    """col2im (a gather, fp32 accumulation) of input rows [h0, h0+hs) against F.fold in fp64."""
    n, c, _, w = x_shape
    g = _i2c_ints(x_shape, k, s, p, d, row0, rows)
    length = rows * g[12]
    kk = c * k[0] * k[1]
    col = torch.randn(col_shape(layout, n, kk, length), generator=torch.Generator().manual_seed(seed)).to(
        dtype
    )
    dx = torch.full((n, c, hs, w), float("nan"), dtype=dtype)
    err = emu.call("col2im", [col, dx], [I2C_DTYPES[dtype], *g, h0, hs, *col_strides(layout, n, kk, length)])
    assert err == 0, f"launch_col2im returned cudaError {err}"
    ref = columns.col2im(col.double(), x_shape, k, s, p, d, row0, rows, layout, h0, hs)
    assert_close_fp64(dx, ref, k[0] * k[1], f"col2im {layout} {dtype}")


# ---- pcilt ---------------------------------------------------------------------------------------
def check_quantize_pack(emu: Emulation, x: torch.Tensor, act_step: float, bits: int) -> None:
    """Fused quantize + pack against ``pack_codes(activation_codes(x))``: exact."""
    n, c, h, w = x.shape
    wp = -(-w * bits // 32)
    out = torch.full((n * c * h, wp), 0x5A5A5A5A, dtype=torch.int32)
    inv = float(inv_step(act_step))
    err = emu.call("quantize_pack", [x.float().contiguous(), out], [n * c * h, w, wp, bits], [inv])
    assert err == 0, f"launch_quantize_pack returned cudaError {err}"
    ref = pcilt_tables.pack_codes(pcilt_tables.activation_codes(x, act_step, bits), bits)
    assert torch.equal(out.view(n, c, h, wp), ref), "quantize_pack differs from pack_codes(activation_codes)"


def lut_case(x_shape: Sequence[int], cout: int, groups: int, k: Pair, bits: int,
             seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, float]:  # fmt: skip
    """(input, weight, act_step) of a PCILT case."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tuple(x_shape), generator=gen)
    wt = torch.randn((cout, x_shape[1] // groups, *k), generator=gen)
    return x, wt, pcilt_tables.default_act_step(x, bits)


def check_lut_conv(emu: Emulation, x: torch.Tensor, wt: torch.Tensor, act_step: float, s: Pair, p: Pair,
                   d: Pair, groups: int, bits: int, *, integer: bool, naive: bool, fused: bool,
                   bias: bool = False, dense: bool = False, whole_tables: bool = False,
                   variant: str = "v1") -> int:  # fmt: skip
    """The lookup conv (naive, tiled or depthwise, as the host plans it) against its oracle; returns the
    plan (-1 depthwise, the tiled kernel's channel block, 0 naive). Integer tables: exact against
    ``reference.lut_conv``; float tables: fp64 ``conv2d`` of the levels; fused: the float epilogue of
    the exact sums. ``dense`` keeps a depthwise call on the tiled kernel (``ops.forward(dense=True)``),
    ``whole_tables`` stages 8-bit tables whole (not as nibble tables), ``variant`` picks the tiled kernel
    (``ops.tiled_variant``: v2 answers ``ops.PLAN_TILED2`` + its channel block where it applies)."""
    n, c, h, w = x.shape
    cout, _, kh, kw = wt.shape
    codes = pcilt_tables.activation_codes(x, act_step, bits)
    packed = pcilt_tables.pack_codes(codes, bits).contiguous()
    t = pcilt_tables.build_tables(wt, bits, integer=integer)
    geo = geometry((n, c, h, w), (kh, kw), s, p, d)
    ho, wo = geo[4], geo[5]
    ints = [
        int(not integer),
        n,
        c,
        h,
        w,
        packed.shape[3],
        cout,
        groups,
        kh,
        kw,
        *s,
        *p,
        *d,
        ho,
        wo,
        bits,
        pcilt_ops.kernel_flags(naive, dense, whole_tables, variant),
    ]
    plan = emu.call("lut_plan", [], ints) if emu.sanitizer is None else -1
    out_dtype = torch.float32 if fused or not integer else torch.int32
    sentinel = float("nan") if out_dtype == torch.float32 else -(2**31)
    out = torch.full((n, cout, ho, wo), sentinel, dtype=out_dtype)
    b = torch.randn(cout, generator=torch.Generator().manual_seed(1)) if bias else None
    scale = pcilt_ref.output_scale(t, act_step)
    err = emu.call("lut_conv", [packed, t.tables, out, b], [*ints, int(fused)], [scale])
    assert err == 0, f"launch_lut_conv returned cudaError {err}"
    what = (
        f"lut_conv plan={plan} bits={bits} integer={integer} fused={fused} whole_tables={whole_tables} "
        f"variant={variant}"
    )
    if integer:
        acc = pcilt_ref.lut_conv(codes, t, s, p, d, groups)
        if fused:
            ref = acc.to(torch.float32) * torch.tensor(scale, dtype=torch.float32)
            ref = ref + b.view(1, -1, 1, 1) if b is not None else ref
            assert torch.equal(out, ref), f"{what}: differs from the exact sums' epilogue"
        else:
            assert torch.equal(out.long(), acc), f"{what}: differs from the exact integer oracle"
    else:
        lv = (codes + qrange(bits)[0]).double()
        ref = F.conv2d(lv, wt.double(), None, s, p, d, groups)
        if fused:
            ref = ref * scale + (b.double().view(1, -1, 1, 1) if b is not None else 0)
        levels_max = float(1 << (bits - 1))
        assert_close_fp64(out / levels_max, ref / levels_max, c // groups * kh * kw, what)
    return plan


# ---- edsr ----------------------------------------------------------------------------------------
def check_sep_conv(emu: Emulation, n: int, c: int, h: int, w: int, *, residual: bool, relu: bool,
                   res_scale: float = 0.5, seed: int = 0, variant: int = 1) -> None:  # fmt: skip
    """The fused depthwise-separable block (``variant`` 1, or 2: prefetched chunk staging) against
    ``reference.sep_conv`` in fp64."""
    gen = torch.Generator().manual_seed(seed)
    x, wd, bd = torch.randn(n, c, h, w, generator=gen), torch.randn(c, 1, 3, 3, generator=gen), torch.randn(c)
    wpw, bp = torch.randn(c, c, 1, 1, generator=gen) / math.sqrt(c), torch.randn(c, generator=gen)
    res = torch.randn(n, c, h, w, generator=gen) if residual else None
    y = torch.full((n, c, h, w), float("nan"))
    err = emu.call("sep_conv", [x, wd, bd, wpw, bp, res, y], [n, c, h, w, int(relu), variant], [res_scale])
    assert err == 0, f"launch_sep_conv_fwd_fp32 returned cudaError {err}"
    d = [None if t is None else t.double() for t in (x, wd, bd, wpw, bp, res)]
    ref = edsr_ref.sep_conv(d[0], d[1], d[2], d[3], d[4], d[5], res_scale, relu)  # type: ignore[arg-type]
    assert_close_fp64(y, ref, 9 * c, f"sep_conv v{variant} C={c} {h}x{w} residual={residual} relu={relu}")


# ---- _controls -----------------------------------------------------------------------------------
CONTROL_MODES = {"correct": 0, "noop": 1, "wrong_border": 2, "wrong_odd_stride2": 3}


def check_control(emu: Emulation, mode: str, x: torch.Tensor, k: Pair, s: Pair, p: Pair, d: Pair,
                  repeat_planes: int = 0) -> None:  # fmt: skip
    """A control kernel against its fp64 CPU twin (``kernels._controls.cpu``); noop writes nothing."""
    n, c = x.shape[0], x.shape[1]
    gen = torch.Generator().manual_seed(3)
    wt = torch.randn(c, 1, *k, generator=gen).to(x.dtype)
    b = torch.randn(c, generator=gen).to(x.dtype)
    g = geometry(tuple(x.shape), k, s, p, d)
    y = torch.full((n, c, g[4], g[5]), float("nan"), dtype=x.dtype)
    err = emu.call(
        "control", [x.contiguous(), wt, b, y], [CONTROL_MODES[mode], DTYPE_CODES[x.dtype], repeat_planes, *g]
    )
    assert err == 0, f"launch_control returned cudaError {err}"
    if mode == "noop":
        assert y.isnan().all(), "the noop control wrote its output"
        return
    args = (x.double(), wt.double(), b.double(), s, p, d, c)
    twin = {"correct": F.conv2d, "wrong_border": controls_cpu.wrong_border,
            "wrong_odd_stride2": controls_cpu.wrong_odd_stride2}[mode]  # fmt: skip
    assert_close_fp64(y, twin(*args), k[0] * k[1], f"control {mode} {x.dtype}")
