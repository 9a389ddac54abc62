"""PCILT conv2d on a GPU: fused quantize+pack kernel, then a lookup-table conv kernel.

``forward`` (tiled kernel: a 16x16 output tile x up to 8 output channels per block, input codes and
the block's tables staged in shared memory; a depthwise call with 4-bit codes, a square 3/5/7
kernel, stride 1 and dilation 1 runs the depthwise kernel instead: many channels per block, 8
outputs x 4 rows per thread from whole packed words) and ``naive_forward`` (one thread per output,
codes and tables from global memory: the baseline of the ">= 5x" goal) share everything else.
``dense=True`` keeps a depthwise call on the dense tiled kernel (the depthwise kernel's A/B
baseline, in the same build). 8-bit tables are staged as two 16-entry nibble tables a tap
(``whole_tables=True``: 256 entries, the baseline). Tables
are built once per weight and cached (keyed on the weight object, its version and the table
settings); :func:`build_tables` builds them explicitly. Inference only: no autograd.
"""

from __future__ import annotations

import functools
import os

import torch

from kernels import _build
from kernels._weight_cache import WeightCache
from kernels.conv_args import IntPair, normalize, out_size
from kernels.pcilt.reference import output_scale
from kernels.pcilt.tables import PCILTTables, check_bits, check_tables, default_act_step, memory_report
from kernels.pcilt.tables import build_tables as _build_tables
from kernels.quant import inv_step

FAMILY = "pcilt"
CACHE_SIZE = 8
# Kernel choice bits of the lut_conv op (pcilt.cu's kLut*).
NAIVE, DENSE, WHOLE_TABLES, TILED_V2 = 1, 2, 4, 8
KERNELS = {-1: "depthwise", 0: "naive"}  # lut_conv_kernel's answer; a channel block (> 0) is "tiled"
PLAN_TILED2 = 16  # lut_conv_kernel's answer for the v2 tiled kernel: PLAN_TILED2 + its channel block
TILED_VARIANTS = ("v1", "v2")
TILED_VARIANT_ENV = "CONVPERF_PCILT_VARIANT"


def tiled_variant(variant: str | None = None) -> str:
    """``variant``, else ``$CONVPERF_PCILT_VARIANT`` (read on every call, so one process can time both):
    ``v1`` (default until a GPU measures v2) is the 16x16-tile kernel, one output pixel a thread; ``v2``
    (``lut_tiled2_kernel``) a 32x32 tile, 2x2 pixels x 8 or 4 output channels a thread, channel groups
    double-buffered, whole packed words unpacked in registers. v2 runs where it applies (at least 4
    output channels a group, tables in shared memory; not 8-bit whole tables), v1 elsewhere."""
    value = variant if variant is not None else os.environ.get(TILED_VARIANT_ENV, "v1")
    if value not in TILED_VARIANTS:
        where = "variant" if variant is not None else TILED_VARIANT_ENV
        raise ValueError(f"{where}={value!r} must be one of {', '.join(TILED_VARIANTS)}")
    return value


_tables: WeightCache[PCILTTables] = WeightCache(CACHE_SIZE)
_packed: WeightCache[torch.Tensor] = WeightCache(CACHE_SIZE)


def quantize_pack_fake(x: torch.Tensor, inv: float, bits: int) -> torch.Tensor:
    """The output the quantize_pack op allocates (its shape function)."""
    n, c, h, w = x.shape
    return x.new_empty((n, c, h, (w * bits + 31) // 32), dtype=torch.int32)


def lut_conv_fake(
    packed: torch.Tensor,
    tables: torch.Tensor,
    width: int,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    bits: int,
    flags: int,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """The output the lut_conv op allocates (its shape function)."""
    n, _, h, _ = packed.shape
    cout, _, kh, kw, _ = tables.shape
    ho = out_size(h, kh, stride[0], padding[0], dilation[0])
    wo = out_size(width, kw, stride[1], padding[1], dilation[1])
    dtype = torch.float32 if scale is not None else tables.dtype
    return tables.new_empty((n, cout, ho, wo), dtype=dtype)


def _register_fakes() -> None:
    ns = _build.namespace(FAMILY)  # after the load: a revision's copy has its own (see _build)
    torch.library.register_fake(f"{ns}::quantize_pack")(quantize_pack_fake)
    torch.library.register_fake(f"{ns}::lut_conv")(lut_conv_fake)


_cuda_ops = _build.LazyOps(FAMILY, _register_fakes)


def build_tables(
    weight: torch.Tensor, bits: int, *, integer: bool = True, weight_step: float | None = None
) -> PCILTTables:
    """Tables for ``weight`` (cached: rebuilt only when the weight object or its contents change)."""
    return _tables.get(
        weight,
        (bits, integer, weight_step),
        lambda: _build_tables(weight, bits, integer=integer, weight_step=weight_step),
    )


def clear_cache() -> None:
    """Drop every cached table and packed input (e.g. to measure table building)."""
    _tables.clear()
    _packed.clear()


def quantize_pack(x: torch.Tensor, act_step: float, bits: int) -> torch.Tensor:
    """Codes of ``x`` packed ``32/bits`` to an int32 word along W: ``[N, C, H, ceil(W*bits/32)]``."""
    check_bits(bits)
    out: torch.Tensor = _cuda_ops().quantize_pack(x.float().contiguous(), float(inv_step(act_step)), bits)
    return out


def packed_input(x: torch.Tensor, act_step: float, bits: int) -> torch.Tensor:
    """``quantize_pack`` of ``x``, cached per input object and version: activations that arrive
    already packed (from a previous quantized layer) are packed once, not on every call."""
    return _packed.get(x, (act_step, bits), lambda: quantize_pack(x, act_step, bits))


def _check_device(x: torch.Tensor) -> None:
    """CUDA tensors run the kernels; ``meta`` ones only their shapes (counting launches and bytes)."""
    if x.device.type not in ("cuda", "meta"):
        raise ValueError(
            "the PCILT kernels need a CUDA tensor; on the CPU use kernels.pcilt.reference.forward"
        )


def kernel_flags(naive: bool, dense: bool, whole_tables: bool = False, variant: str | None = None) -> int:
    """The lut_conv op's kernel choice bits for these options (``variant``: :func:`tiled_variant`)."""
    v2 = tiled_variant(variant) == "v2"
    flags = (NAIVE if naive else 0) | (DENSE if dense else 0) | (WHOLE_TABLES if whole_tables else 0)
    return flags | (TILED_V2 if v2 else 0)


def _lut_conv(
    input: torch.Tensor,
    tables: PCILTTables,
    stride: IntPair,
    padding: IntPair | str,
    dilation: IntPair,
    groups: int,
    *,
    act_step: float,
    flags: int,
    prepacked: bool,
    scale: float | None,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    probe = tables.tables.new_empty(tables.tables.shape[:4], dtype=input.dtype)
    x, a, unbatched = normalize(input, probe, bias, stride, padding, dilation, groups)
    _check_device(x)
    packed = packed_input(x, act_step, tables.bits) if prepacked else quantize_pack(x, act_step, tables.bits)
    out: torch.Tensor = _cuda_ops().lut_conv(
        packed,
        tables.tables,
        x.shape[3],
        list(a.stride),
        list(a.padding),
        list(a.dilation),
        a.groups,
        tables.bits,
        flags,
        scale,
        bias.float().contiguous() if bias is not None else None,
    )
    return out.squeeze(0) if unbatched else out


def lut_kernel(
    input: torch.Tensor,
    weight: torch.Tensor,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    *,
    bits: int = 4,
    integer: bool = True,
    naive: bool = False,
    dense: bool = False,
    whole_tables: bool = False,
) -> str:
    """Which lookup kernel ``forward`` runs on these arguments, as the host decides before launching:
    ``"depthwise"``, ``"tiled"`` or ``"naive"`` (requested, or the tiled kernel cannot run: grid
    limits, huge stride/dilation tiles); ``"tiled-v2"`` under ``CONVPERF_PCILT_VARIANT=v2`` where v2
    applies. Tables are built (cached) as ``forward`` would."""
    check_bits(bits)
    t = build_tables(weight, bits, integer=integer)
    probe = t.tables.new_empty(t.tables.shape[:4], dtype=input.dtype)
    x, a, _ = normalize(input, probe, None, stride, padding, dilation, groups)
    _check_device(x)
    c, h, w = x.shape[1], x.shape[2], x.shape[3]
    packed = x.new_empty((x.shape[0], c, h, -(-w * bits // 32)), dtype=torch.int32)
    plan = int(
        _cuda_ops().lut_conv_kernel(
            packed,
            t.tables,
            w,
            list(a.stride),
            list(a.padding),
            list(a.dilation),
            a.groups,
            bits,
            kernel_flags(naive, dense, whole_tables),
        )
    )
    return "tiled-v2" if plan > PLAN_TILED2 else KERNELS.get(plan, "tiled")


def lut_accumulate(
    input: torch.Tensor,
    tables: PCILTTables,
    stride: IntPair = 1,
    padding: IntPair | str = 0,
    dilation: IntPair = 1,
    groups: int = 1,
    *,
    act_step: float,
    naive: bool = False,
    dense: bool = False,
    whole_tables: bool = False,
) -> torch.Tensor:
    """Raw sums of table entries (int32 for integer tables, float32 otherwise), ``[N, C_out, Ho, Wo]``."""
    return _lut_conv(
        input,
        tables,
        stride,
        padding,
        dilation,
        groups,
        act_step=act_step,
        flags=kernel_flags(naive, dense, whole_tables),
        prepacked=False,
        scale=None,
        bias=None,
    )


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
    naive: bool = False,
    dense: bool = False,
    whole_tables: bool = False,
    prepacked: bool = False,
) -> torch.Tensor:
    """PCILT conv2d (signature of ``F.conv2d``; inference only). See ``reference.forward``.

    Two kernels: quantize+pack, then the lookup conv with the scale and bias fused into its
    epilogue. ``prepacked=True`` reuses the packed codes of an input object seen before (the
    "packed 4-bit inputs" case: activations that a previous quantized layer already packed).
    ``dense=True`` runs a depthwise call on the dense tiled kernel (the depthwise kernel's baseline);
    ``whole_tables=True`` stages 8-bit tables whole (256 entries a tap) instead of as two 16-entry
    nibble tables (the split's baseline).
    """
    if torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad):
        raise RuntimeError(
            "PCILT is an inference kernel without gradients; "
            "call it under torch.no_grad() or detach the inputs"
        )
    check_bits(bits)
    if tables is not None:
        check_tables(tables, weight, bits)
    t = tables if tables is not None else build_tables(weight, bits, integer=integer, weight_step=weight_step)
    sx = act_step if act_step is not None else default_act_step(input, bits)
    out = _lut_conv(
        input,
        t,
        stride,
        padding,
        dilation,
        groups,
        act_step=sx,
        flags=kernel_flags(naive, dense, whole_tables),
        prepacked=prepacked,
        scale=output_scale(t, sx),
        bias=bias,
    )
    return out.to(input.dtype)


naive_forward = functools.partial(forward, naive=True)
naive_forward.__doc__ = "PCILT with the naive one-thread-per-output kernel (the baseline)."
prepacked_forward = functools.partial(forward, prepacked=True)
prepacked_forward.__doc__ = (
    "PCILT on activations packed once per input object (packing excluded after the first call)."
)

__all__ = [
    "build_tables",
    "clear_cache",
    "forward",
    "lut_accumulate",
    "lut_kernel",
    "memory_report",
    "naive_forward",
    "quantize_pack",
]
