"""The im2col+GEMM sweep's cases: every variant on the suite's problems (LeNet seed, EDSR, int8 goal).

Variants: ``gemm`` (fp32 im2col + cuBLAS), ``quantized`` (LSQ int8, ``torch._int_mm``), ``sparse``
(unstructured, density 0.5, cuSPARSE), ``sparse_struct`` (filter pruning, density 0.5) and, on fp16
problems, ``sparse_2to4`` (semi-structured). Forward and backward, as the suite times them. A new
variant adds its rows to :func:`cases`.

Tuning rows (issue 28): int8 LSQ on the seed problem (both layouts), ``v1`` (im2col + ``_int_mm``)
against ``v2`` (Triton, 3 launches); fp32 on the EDSR shapes, the column buffer bounded to 24 MiB
(within L2) against 256 MiB, and the implicit GEMM; the seed's GEMM alone, dense fp16 against 2:4
(``gemm_only_*``), beside the whole sparse convs. Predictions: ``docs/tuning-log.md``.
"""

from __future__ import annotations

import functools
import os

import torch

from kernels.im2col_gemm import ops
from kernels.im2col_gemm import variants as sparse_variants
from kernels.quant import lsq_init_step
from kernels.sweep_calls import ConvFn, conv_case
from kernels.sweep_case import Call, Case
from pytest_convperf import Conv2dProblem

FAMILY = "im2col_gemm"
PHASES = ("forward", "backward")
PROBLEMS = (
    Conv2dProblem(n=64, c_in=6, h=14, w=14, c_out=16, kernel=(3, 3), padding=(1, 1)),  # LeNet seed
    Conv2dProblem(n=256, c_in=6, h=14, w=14, c_out=16, kernel=(3, 3), padding=(1, 1)),
    Conv2dProblem(n=16, c_in=64, h=48, w=48, c_out=64, kernel=(3, 3), padding=(1, 1)),  # EDSR body
    Conv2dProblem(n=1, c_in=64, h=256, w=256, c_out=64, kernel=(3, 3), padding=(1, 1)),
    Conv2dProblem(n=16, c_in=256, h=48, w=48, c_out=256, kernel=(3, 3), padding=(1, 1)),  # int8 goal
    Conv2dProblem(n=16, c_in=256, h=48, w=48, c_out=256, kernel=(3, 3), padding=(1, 1), dtype="fp16"),
)


def lsq(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, *args: object) -> torch.Tensor:
    """LSQ int8 with the steps LSQ starts from on these inputs (as the suite binds them)."""
    key = (id(x), id(w))
    if key not in _steps:  # once per input set: the timed calls only read it
        _steps[key] = (lsq_init_step(x, 8), lsq_init_step(w, 8))
    steps = _steps[key]
    return ops.lsq_forward(x, w, b, *args, act_step=steps[0], weight_step=steps[1])


_steps: dict[tuple[int, int], tuple[float, float]] = {}

VARIANTS: dict[str, ConvFn] = {
    "gemm": ops.forward,
    "quantized": lsq,
    "sparse": functools.partial(ops.sparse_forward, density=0.5),
    "sparse_struct": functools.partial(ops.structured_forward, pattern="filter", density=0.5),
}


# Sparse (issue 28): predicted µs of the forward on the fp16 seed problem (C_out 256), written before
# the GPU measures (docs/tuning-log.md, "Sparse variants"). Goal: 2:4 >= 1.1x our dense fp16 GEMM.
SPARSE_SEED = PROBLEMS[-1]
SPARSE_PREDICTED_US = {"gemm": 225.0, "sparse_2to4": 225.0, "sparse": 3000.0}


def _suite_cases() -> list[Case]:
    out: list[Case] = []
    for problem in PROBLEMS:
        variants = dict(VARIANTS)
        if problem.dtype == "fp16":  # 2:4 needs fp16/bf16 (to_sparse_semi_structured)
            variants["sparse_2to4"] = functools.partial(ops.structured_forward, pattern="2:4")
        for name, fn in variants.items():
            for phase in PHASES:
                seed = problem == SPARSE_SEED and phase == "forward"
                guess = SPARSE_PREDICTED_US.get(name) if seed else None
                out.append(conv_case(FAMILY, name, fn, problem, phase, predicted_us=guess))
    return out


# ---- tuning rows: the new variants against the old, with predictions ----
INT8_SEED = Conv2dProblem(n=16, c_in=256, h=48, w=48, c_out=256, kernel=(3, 3), padding=(1, 1), dtype="fp16")
EDSR_SHAPES = (
    Conv2dProblem(n=16, c_in=64, h=48, w=48, c_out=64, kernel=(3, 3), padding=(1, 1)),
    Conv2dProblem(n=1, c_in=64, h=256, w=256, c_out=64, kernel=(3, 3), padding=(1, 1)),
)
# Predicted µs on an H100 SXM (docs/tuning-log.md), written before the GPU measures.
INT8_PREDICTED_US = {"v1": 290.0, "v2": 47.0}
FP32_WORKSPACES = {"chunk24MiB": 24 * 1024 * 1024, "chunk256MiB": 256 * 1024 * 1024}
FP32_PREDICTED_US = {
    ("chunk24MiB", 0): 65.0,
    ("chunk24MiB", 1): 106.0,
    # the bias as a pass after the GEMMs (CONVPERF_IM2COL_BIAS=add): + a read and a write of the
    # output (18.9 / 33.6 MB at ~2.6 TB/s)
    ("chunk24MiB_bias_add", 0): 72.0,
    ("chunk24MiB_bias_add", 1): 119.0,
    ("implicit", 0): 60.0,
    ("implicit", 1): 105.0,
}


def _lsq_call(problem: Conv2dProblem, variant: str, device: str) -> Call:
    x, w, b = problem.make_inputs(seed=0, device=device)
    sx, sw = 0.02, 0.005  # fixed steps: no data-dependent init inside the timed call

    def call() -> object:
        with torch.no_grad():
            return ops.lsq_forward(
                x, w, b, *problem.conv_args(), act_step=sx, weight_step=sw, variant=variant
            )

    return call


def _fp32_call(problem: Conv2dProblem, workspace: int, device: str, bias: str = "gemm") -> Call:
    x, w, b = problem.make_inputs(seed=0, device=device)

    def call() -> object:
        # Read by the op on each call; restored, so no later row inherits it (host-side writes).
        before = os.environ.get(ops.BIAS_VARIANT_ENV)
        os.environ[ops.BIAS_VARIANT_ENV] = bias
        try:
            with torch.no_grad():
                return ops.forward(x, w, b, *problem.conv_args(), workspace_bytes=workspace)
        finally:
            if before is None:
                del os.environ[ops.BIAS_VARIANT_ENV]
            else:
                os.environ[ops.BIAS_VARIANT_ENV] = before

    return call


def _implicit_call(problem: Conv2dProblem, device: str) -> Call:
    x, w, b = problem.make_inputs(seed=0, device=device)

    def call() -> object:
        with torch.no_grad():
            return ops.implicit_forward(x, w, b, *problem.conv_args())

    return call


# The GEMM alone on the seed's whole column matrix ([256, 2304] x [2304, 16 * 2304] fp16): the 2:4
# goal's kernels without the conv's im2col and output copy around them.
GEMM_ONLY_PREDICTED_US = {"dense": 72.0, "2to4": 57.0}


def _gemm_only_call(kind: str, device: str) -> Call:
    p = SPARSE_SEED
    gen = torch.Generator().manual_seed(0)
    k, n = p.c_in * 9, p.n * p.h * p.w
    w = torch.randn(p.c_out, p.c_in, 3, 3, generator=gen).to(device, torch.float16)
    cols = torch.randn(k, n, generator=gen).to(device, torch.float16)
    prep = sparse_variants.sparse_weight(w, 1, kind="2:4")  # built here, outside the timed call
    assert prep.mask is not None
    dense = (w * prep.mask.to(w.dtype)).reshape(p.c_out, k)
    mm = sparse_variants.two_four_mm(prep.operands)  # masked dense on a CPU / without cuSPARSELt

    def call() -> object:
        with torch.no_grad():
            return torch.mm(dense, cols) if kind == "dense" else mm(0, dense, cols)

    return call


def _gemm_only_cases() -> list[Case]:
    p = SPARSE_SEED
    moved = (p.c_out * p.c_in * 9 + p.c_in * 9 * p.n * p.h * p.w + p.c_out * p.n * p.h * p.w) * 2
    return [
        Case(
            FAMILY,
            f"gemm_only_{kind}",
            p.id,
            "forward",
            moved,
            functools.partial(_gemm_only_call, kind),
            GEMM_ONLY_PREDICTED_US[kind],
        )
        for kind in ("dense", "2to4")
    ]


def _tuning_cases() -> list[Case]:
    out = _gemm_only_cases()
    for layout in ("nchw", "nhwc"):
        p = INT8_SEED.replace(layout=layout)
        for variant in ops.LSQ_VARIANTS:
            make = functools.partial(_lsq_call, p, variant)
            out.append(Case(FAMILY, f"lsq_{variant}", p.id, "forward", p.min_bytes, make,
                            INT8_PREDICTED_US[variant] if layout == "nchw" else None))  # fmt: skip
    for i, p in enumerate(EDSR_SHAPES):
        for name, workspace in FP32_WORKSPACES.items():
            make = functools.partial(_fp32_call, p, workspace)
            out.append(
                Case(FAMILY, name, p.id, "forward", p.min_bytes, make, FP32_PREDICTED_US.get((name, i)))
            )
        make = functools.partial(_fp32_call, p, FP32_WORKSPACES["chunk24MiB"], bias="add")
        guess = FP32_PREDICTED_US[("chunk24MiB_bias_add", i)]
        out.append(Case(FAMILY, "chunk24MiB_bias_add", p.id, "forward", p.min_bytes, make, guess))
        make = functools.partial(_implicit_call, p)
        out.append(
            Case(FAMILY, "implicit", p.id, "forward", p.min_bytes, make, FP32_PREDICTED_US[("implicit", i)])
        )
    return out


def cases() -> list[Case]:
    return _suite_cases() + _tuning_cases()
