"""im2col+GEMM conv2d: CUDA im2col/col2im kernels, GEMMs in cuBLAS through torch.

The CUDA ops (``torch.ops.convperf_im2col_gemm.im2col`` / ``col2im``) load on first use through
``kernels._build``. On a CPU tensor the same code runs with the torch-ops column builders of
:mod:`kernels.im2col_gemm.columns`, so the chunking, GEMM and backward logic is exercised anywhere.

:func:`forward` is the custom op ``convperf_im2col_gemm_py::conv2d`` whose backward
(``conv2d_backward``) rebuilds the columns chunk by chunk, so forward and backward both keep the
column buffer under ``workspace_bytes``
(default 24 MiB: within L2); with one group its bias rides in the GEMM (a bias column on the
weight matrix, a ones row on the columns; ``CONVPERF_IM2COL_BIAS=add`` adds it in a pass after).
Variants: :func:`lsq_forward` (int8 GEMM through
``torch._int_mm``; LSQ gradients), :func:`lsq_accumulate`, :func:`sparse_forward`,
:func:`structured_forward`.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from kernels import _build
from kernels._weight_cache import WeightCache
from kernels.conv_args import FLOAT_DTYPES, ConvArgs, conv2d_entry, geometry, out_size
from kernels.im2col_gemm import columns, variants
from kernels.im2col_gemm.chunking import DEFAULT_WORKSPACE_BYTES, input_rows, plan_chunks
from kernels.quant import Step, lsq_fake_quant, lsq_init_step, step_tensor

FAMILY = "im2col_gemm"
LSQ_VARIANTS = ("v1", "v2")
LSQ_VARIANT_ENV = "CONVPERF_LSQ_VARIANT"
BIAS_VARIANTS = ("gemm", "add")
BIAS_VARIANT_ENV = "CONVPERF_IM2COL_BIAS"


def bias_variant() -> str:
    """``$CONVPERF_IM2COL_BIAS`` (read on every call, so one process can time both): ``gemm`` (default)
    adds the fp32/fp16 explicit path's bias inside the GEMM (a bias column on the weight matrix, a ones
    row on the column buffer: no pass over the output); ``add`` adds it in a pass after the GEMMs."""
    value = os.environ.get(BIAS_VARIANT_ENV, "gemm")
    if value not in BIAS_VARIANTS:
        raise ValueError(f"{BIAS_VARIANT_ENV}={value!r} must be one of {', '.join(BIAS_VARIANTS)}")
    return value


def lsq_variant(variant: str | None = None) -> str:
    """``variant``, else ``$CONVPERF_LSQ_VARIANT`` (read on every call, so one process can time both):
    ``v1`` is the int8 im2col column buffer + ``torch._int_mm`` (cuBLASLt) + torch elementwise
    passes; ``v2`` (default) is :mod:`kernels.im2col_gemm.lsq_triton`, 3 launches and no column
    buffer (on the CPU it runs under Triton's interpreter)."""
    value = variant if variant is not None else os.environ.get(LSQ_VARIANT_ENV, "v2")
    if value not in LSQ_VARIANTS:
        where = "variant" if variant is not None else LSQ_VARIANT_ENV
        raise ValueError(f"{where}={value!r} must be one of {', '.join(LSQ_VARIANTS)}")
    return value


def _register_cpp_rules() -> None:
    def im2col_fake(
        x: torch.Tensor,
        kernel: list[int],
        stride: list[int],
        padding: list[int],
        dilation: list[int],
        row_start: int,
        rows: int,
        layout: str,
        pad_k_to: int,
        ones_row: bool = False,
    ) -> torch.Tensor:
        n, c = x.shape[0], x.shape[1]
        wo = out_size(x.shape[3], kernel[1], stride[1], padding[1], dilation[1])
        k = c * kernel[0] * kernel[1] + int(ones_row)
        kt = -(-k // pad_k_to) * pad_k_to
        length = rows * wo
        shape = {"nkl": (n, kt, length), "knl": (kt, n, length), "nlk": (n, length, kt)}[layout]
        return x.new_empty(shape)

    def col2im_fake(
        col: torch.Tensor,
        input_shape: list[int],
        kernel: list[int],
        stride: list[int],
        padding: list[int],
        dilation: list[int],
        row_start: int,
        rows: int,
        layout: str,
        h_start: int,
        h_rows: int,
    ) -> torch.Tensor:
        n, c, _, w = input_shape
        return col.new_empty((n, c, h_rows, w))

    ns = _build.namespace(FAMILY)  # after the load: a revision's copy has its own (see _build)
    torch.library.register_fake(f"{ns}::im2col")(im2col_fake)
    torch.library.register_fake(f"{ns}::col2im")(col2im_fake)

    def im2col_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        x, *rest = inputs
        ctx.shape = list(x.shape)
        ctx.rest = rest

    def im2col_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        kernel, stride, padding, dilation, row_start, rows, layout = ctx.rest[:7]
        dx = im2col_grad(grad, ctx.shape, kernel, stride, padding, dilation, row_start, rows, layout)
        return (dx, *(None for _ in ctx.rest))

    torch.library.register_autograd(f"{ns}::im2col", im2col_backward, setup_context=im2col_setup)


# Build/load the extension once and register fake and autograd rules for its ops.
_cuda_ops = _build.LazyOps(FAMILY, _register_cpp_rules)


def im2col_grad(
    grad_col: torch.Tensor,
    shape: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    row_start: int,
    rows: int,
    layout: str,
) -> torch.Tensor:
    """Gradient of im2col w.r.t. its input (full input shape): col2im of the rows the band read."""
    h = shape[2]
    lo, hi = input_rows(row_start, row_start + rows, h, kernel[0], stride[0], padding[0], dilation[0])
    part = col2im(grad_col, shape, kernel, stride, padding, dilation, row_start, rows, layout, lo, hi - lo)
    if lo == 0 and hi == h:
        return part
    return torch.nn.functional.pad(part, (0, 0, lo, h - hi))


def im2col(
    x: torch.Tensor,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    row_start: int,
    rows: int,
    layout: str = "nkl",
    pad_k_to: int = 1,
    ones_row: bool = False,
) -> torch.Tensor:
    """Column buffer (CUDA kernel on a GPU tensor, ``F.unfold`` on a CPU one); see ``columns.im2col``."""
    if x.is_cuda:
        out: torch.Tensor = _cuda_ops().im2col(
            x,
            list(kernel),
            list(stride),
            list(padding),
            list(dilation),
            row_start,
            rows,
            layout,
            pad_k_to,
            ones_row,
        )
        return out
    return columns.im2col(x, kernel, stride, padding, dilation, row_start, rows, layout, pad_k_to, ones_row)


def col2im(
    col: torch.Tensor,
    input_shape: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    row_start: int,
    rows: int,
    layout: str,
    h_start: int,
    h_rows: int,
) -> torch.Tensor:
    """Adjoint of :func:`im2col` for input rows ``[h_start, h_start + h_rows)`` (gather, no atomics)."""
    if col.is_cuda:
        out: torch.Tensor = _cuda_ops().col2im(
            col,
            list(input_shape),
            list(kernel),
            list(stride),
            list(padding),
            list(dilation),
            row_start,
            rows,
            layout,
            h_start,
            h_rows,
        )
        return out
    return columns.col2im(
        col, input_shape, kernel, stride, padding, dilation, row_start, rows, layout, h_start, h_rows
    )


# ---- dense conv: custom op with a chunked backward -------------------------------------------
def _args(
    kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], groups: int
) -> ConvArgs:
    return ConvArgs(
        (kernel[0], kernel[1]),
        (stride[0], stride[1]),
        (padding[0], padding[1]),
        (dilation[0], dilation[1]),
        groups,
    )


# Named through _build like the CUDA ops: a revision's copy in an A/B registers its own (one fixed name
# made REF's body replace HEAD's, process-wide: issue 37 item 1).
PY_NAMESPACE = f"{_build.namespace(FAMILY)}_py"


@torch.library.custom_op(f"{PY_NAMESPACE}::conv2d", mutates_args=())
def _conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    workspace_bytes: int,
) -> torch.Tensor:
    a = _args(weight.shape[2:], stride, padding, dilation, groups)
    x = x.contiguous()
    n = x.shape[0]
    ho, wo, k, cog = geometry(x, weight, a)
    g = groups
    out = x.new_empty((n, weight.shape[0], ho, wo))
    # The bias in the GEMM: a bias column on the weight matrix times a ones row on the columns (one
    # group only: the column buffer has one ones row; and only when a row of columns with the ones
    # still fits the workspace). Else, or with the "add" variant: a pass after.
    fits = (k + 1) * wo * x.element_size() <= workspace_bytes
    in_gemm = bias is not None and g == 1 and fits and bias_variant() == "gemm"
    wmat = weight.contiguous().view(g, cog, k)
    if bias is not None and in_gemm:
        wmat = _weight_with_bias(weight, bias)
    kb = k + int(in_gemm)
    for ch in plan_chunks(n, ho, wo, g * kb, x.element_size(), workspace_bytes):
        nb, rows = ch.n1 - ch.n0, ch.r1 - ch.r0
        col = im2col(
            x[ch.n0 : ch.n1], a.kernel, a.stride, a.padding, a.dilation, ch.r0, rows, ones_row=in_gemm
        ).view(nb, g, kb, -1)
        # Write the GEMM straight into the output; a band of rows is a strided matrix of it
        # ([cog, rows * wo] with row stride ho * wo), which cuBLAS writes without a temporary.
        torch.matmul(wmat, col, out=out[ch.n0 : ch.n1, :, ch.r0 : ch.r1].view(nb, g, cog, rows * wo))
    if bias is not None and not in_gemm:
        out.add_(bias.view(1, -1, 1, 1))
    return out


_biased: WeightCache[tuple[weakref.ref[torch.Tensor], torch.Tensor]] = WeightCache(8)


def _weight_with_bias(weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``[1, C_out, C_in*kh*kw + 1]``: the weight matrix with the bias as its last column, built once per
    (weight, bias) version (a layer's parameters change only at an optimizer step)."""

    def build() -> tuple[weakref.ref[torch.Tensor], torch.Tensor]:
        cout = weight.shape[0]
        return weakref.ref(bias), torch.cat([weight.reshape(cout, -1), bias.view(cout, 1)], 1).unsqueeze(0)

    key = (id(bias), bias._version)
    ref, wmat = _biased.get(weight, key, build)
    if ref() is not bias:  # a new bias that reuses a freed one's id: never the stale column
        ref, wmat = build()
    return wmat


@_conv2d.register_fake
def _conv2d_fake(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    workspace_bytes: int,
) -> torch.Tensor:
    a = _args(weight.shape[2:], stride, padding, dilation, groups)
    ho, wo, _, _ = geometry(x, weight, a)
    return x.new_empty((x.shape[0], weight.shape[0], ho, wo))


@torch.library.custom_op(f"{PY_NAMESPACE}::conv2d_backward", mutates_args=())
def _conv2d_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    workspace_bytes: int,
    with_bias: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = _args(weight.shape[2:], stride, padding, dilation, groups)
    x = x.contiguous()
    gy = grad_out.contiguous()
    n, c, h, _ = x.shape
    ho, wo, k, cog = geometry(x, weight, a)
    g = groups
    wmat_t = weight.contiguous().view(g, cog, k).transpose(1, 2)
    dw = torch.zeros((g, cog, k), dtype=torch.float32, device=x.device)
    chunks = plan_chunks(n, ho, wo, g * k, x.element_size(), workspace_bytes)
    banded = any(ch.r1 - ch.r0 != ho for ch in chunks)
    dx = torch.zeros_like(x) if banded else torch.empty_like(x)
    for ch in chunks:
        nb, rows = ch.n1 - ch.n0, ch.r1 - ch.r0
        col = im2col(x[ch.n0 : ch.n1], a.kernel, a.stride, a.padding, a.dilation, ch.r0, rows).view(
            nb, g, k, -1
        )
        gyc = gy[ch.n0 : ch.n1, :, ch.r0 : ch.r1].reshape(nb, g, cog, rows * wo)
        if col.dtype == dw.dtype:  # fp32: accumulate in place, no [nb, g, cog, K] per-sample buffer to sum
            for i in range(nb):
                dw.baddbmm_(gyc[i], col[i].transpose(1, 2))
        else:  # fp16/bf16: per-sample products summed in fp32 (baddbmm_ needs one dtype)
            dw += torch.matmul(gyc, col.transpose(2, 3)).sum(0, dtype=torch.float32)
        gcol = torch.matmul(wmat_t, gyc).view(nb, g * k, rows * wo)
        if banded:
            lo, hi = input_rows(ch.r0, ch.r1, h, a.kernel[0], a.stride[0], a.padding[0], a.dilation[0])
            dx[ch.n0 : ch.n1, :, lo:hi] += col2im(
                gcol,
                (nb, c, h, x.shape[3]),
                a.kernel,
                a.stride,
                a.padding,
                a.dilation,
                ch.r0,
                rows,
                "nkl",
                lo,
                hi - lo,
            )
        else:
            dx[ch.n0 : ch.n1] = col2im(
                gcol, (nb, c, h, x.shape[3]), a.kernel, a.stride, a.padding, a.dilation, 0, ho, "nkl", 0, h
            )
    db = gy.sum((0, 2, 3), dtype=torch.float32).to(gy.dtype) if with_bias else gy.new_empty((0,))
    return dx, dw.to(weight.dtype).view(weight.shape), db


@_conv2d_backward.register_fake
def _conv2d_backward_fake(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    workspace_bytes: int,
    with_bias: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    db = grad_out.new_empty((weight.shape[0],) if with_bias else (0,))
    return x.new_empty(x.shape), weight.new_empty(weight.shape), db


def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, weight, bias, stride, padding, dilation, groups, workspace_bytes = inputs
    ctx.save_for_backward(x, weight)
    ctx.conf = (stride, padding, dilation, groups, workspace_bytes, bias is not None)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, weight = ctx.saved_tensors
    stride, padding, dilation, groups, workspace_bytes, with_bias = ctx.conf
    dx, dw, db = _conv2d_backward(
        grad, x, weight, stride, padding, dilation, groups, workspace_bytes, with_bias
    )
    return dx, dw, (db if with_bias else None), None, None, None, None, None


_conv2d.register_autograd(_backward, setup_context=_setup)


def _check_device(x: torch.Tensor) -> None:
    if x.is_cuda and x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"dtype {x.dtype} is not supported on CUDA; use float32, float16 or bfloat16")


def _forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: ConvArgs,
    *,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """conv2d by im2col + GEMM (signature of ``F.conv2d``), differentiable.

    The column buffer is built for chunks of the batch (bands of output rows when one sample is
    larger) so it never exceeds ``workspace_bytes`` (default 24 MiB, within an H100's L2), in forward and
    backward.
    """
    out: torch.Tensor = _conv2d(
        x, weight, bias, list(a.stride), list(a.padding), list(a.dilation), a.groups, workspace_bytes
    )
    return out


forward = conv2d_entry(_forward, check=_check_device)


class _Implicit(torch.autograd.Function):
    """Forward: the Triton implicit GEMM (one launch). Backward: the chunked im2col backward."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        a: ConvArgs,
        workspace: int,
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.conf = (a, workspace, bias is not None)
        from kernels.im2col_gemm import implicit_triton  # Triton only where a Triton variant runs

        return implicit_triton.conv(x, weight, bias, a)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        a, workspace, has_bias = ctx.conf
        dx, dw, db = _conv2d_backward(
            grad, x, weight, list(a.stride), list(a.padding), list(a.dilation), a.groups, workspace, has_bias
        )
        return dx, dw, (db if has_bias else None), None, None


def _implicit_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: ConvArgs,
    *,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """conv2d as one implicit GEMM (no column buffer, bias in the epilogue; fp32 in IEEE FMAs), the
    backward through the chunked im2col path (``workspace_bytes``)."""
    out: torch.Tensor = _Implicit.apply(x, weight, bias, a, workspace_bytes)
    return out


implicit_forward = conv2d_entry(_implicit_forward, check=_check_device)


# ---- variants --------------------------------------------------------------------------------
class _LSQInt(torch.autograd.Function):
    """Forward: exact int8 GEMM accumulators scaled back. Backward: LSQ's gradients (fake-quant graph)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        sx: torch.Tensor,
        sw: torch.Tensor,
        a: ConvArgs,
        bits: int,
        workspace_bytes: int,
        variant: str,
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight, bias, sx, sw)
        ctx.conf = (a, bits, workspace_bytes)
        # Steps stay tensors (CPU 0-d for Python floats): no host sync, capturable in a CUDA graph.
        if variant == "v2":  # scales, bias and the cast in the GEMM's epilogue
            from kernels.im2col_gemm import lsq_triton  # Triton only where a Triton variant runs

            fused: torch.Tensor = lsq_triton.conv(
                x, weight, bias, a, act_step=sx, weight_step=sw, bits=bits, accumulate=False
            )
            return fused
        acc = variants.lsq_accumulate(
            x, weight, a, workspace_bytes, im2col, act_step=sx, weight_step=sw, bits=bits
        )
        out = acc.float() * (sx.float() * sw.float())
        if bias is not None:
            out = out + bias.float().view(1, -1, 1, 1)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, bias, sx, sw = ctx.saved_tensors
        a, bits, workspace_bytes = ctx.conf
        with torch.enable_grad():
            leaves = [
                t.detach().requires_grad_(need)
                for t, need in zip((x, weight, sx, sw), (True, True, True, True))
            ]
            lx, lw, lsx, lsw = leaves
            out = columns.conv_gemm(
                lsq_fake_quant(lx, lsx, bits),
                lsq_fake_quant(lw, lsw, bits),
                a,
                workspace_bytes,
                im2col_fn=im2col,
            )
            gx, gw, gsx, gsw = torch.autograd.grad(out, leaves, grad.float(), allow_unused=True)
        gb = grad.sum((0, 2, 3)).to(bias.dtype) if bias is not None else None
        return (
            gx.to(x.dtype) if gx is not None else None,
            gw.to(weight.dtype) if gw is not None else None,
            gb,
            gsx,
            gsw,
            None,
            None,
            None,
            None,
        )


def _step_tensor(step: Step | None, t: torch.Tensor, bits: int) -> torch.Tensor:
    return step_tensor(step if step is not None else lsq_init_step(t, bits))


def _lsq_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: ConvArgs,
    *,
    act_step: Step | None = None,
    weight_step: Step | None = None,
    bits: int = 8,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
    variant: str | None = None,
) -> torch.Tensor:
    """LSQ-quantized conv on an int8 GEMM, exact int32 accumulation (``variant``: :func:`lsq_variant`).

    Output ``acc * s_x * s_w + bias`` in the input's dtype; steps default to LSQ's data init; the
    backward applies LSQ's straight-through and step gradients. Reference: ``reference.lsq_forward``.
    """
    sx, sw = _step_tensor(act_step, x, bits), _step_tensor(weight_step, weight, bits)
    chosen = lsq_variant(variant)
    out: torch.Tensor = _LSQInt.apply(x, weight, bias, sx, sw, a, bits, workspace_bytes, chosen)
    return out


def _lsq_accumulate(
    x: torch.Tensor,
    weight: torch.Tensor,
    a: ConvArgs,
    *,
    act_step: Step,
    weight_step: Step,
    bits: int = 8,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
    variant: str | None = None,
) -> torch.Tensor:
    """int32 accumulators of the quantized conv: the implicit int8 GEMM (v2) or CUDA int8 im2col +
    ``torch._int_mm`` (v1); see :func:`lsq_variant`."""
    if lsq_variant(variant) == "v2":
        from kernels.im2col_gemm import lsq_triton  # Triton only where a Triton variant runs

        return lsq_triton.conv(
            x,
            weight,
            None,
            a,
            act_step=step_tensor(act_step),
            weight_step=step_tensor(weight_step),
            bits=bits,
            accumulate=True,
        )
    return variants.lsq_accumulate(
        x, weight, a, workspace_bytes, im2col, act_step=act_step, weight_step=weight_step, bits=bits
    )


def _sparse_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: ConvArgs,
    *,
    density: float = 0.5,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """Unstructured sparse conv: magnitude pruning to ``density``, CUDA im2col + CSR GEMM (cuSPARSE)."""
    return variants.sparse_conv(x, weight, a, workspace_bytes, im2col, density=density, bias=bias)


def _structured_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: ConvArgs,
    *,
    pattern: str = "2:4",
    density: float = 0.5,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
) -> torch.Tensor:
    """Structured sparse conv: ``2:4`` via ``to_sparse_semi_structured`` (fp16/bf16, sm_80+; masked
    dense GEMM elsewhere) or ``filter`` pruning (GEMM over the kept filters only)."""
    return variants.structured_conv(
        x, weight, a, workspace_bytes, im2col, pattern=pattern, density=density, bias=bias
    )


# The public variants: ``F.conv2d``'s signature plus each body's keyword options (``conv2d_entry``).
lsq_forward = conv2d_entry(_lsq_forward, check=_check_device)
lsq_accumulate = conv2d_entry(_lsq_accumulate, takes_bias=False)
sparse_forward = conv2d_entry(_sparse_forward, check=_check_device)
structured_forward = conv2d_entry(_structured_forward, check=_check_device)
