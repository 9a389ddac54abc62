"""The im2col+GEMM family's sweep: each variant x problem ``python -m kernels.sweep`` times.

int8 LSQ on the seed problem (both layouts): ``v1`` (im2col + ``_int_mm`` + torch passes) against
``v2`` (Triton, 3 launches). fp32 on the EDSR shapes: the column buffer bounded to 24 MiB (the
default, within L2) against 256 MiB (the old default: one buffer through HBM), and the implicit
GEMM (one Triton launch, no column buffer). Predictions: the
roofline in ``docs/tuning-log.md`` (H100 SXM).
"""

from __future__ import annotations

import functools

import torch

from kernels.im2col_gemm import ops
from kernels.sweep_case import Call, Case
from pytest_convperf.problem import Conv2dProblem

FAMILY = "im2col_gemm"
INT8_SEED = Conv2dProblem(n=16, c_in=256, h=48, w=48, c_out=256, kernel=(3, 3), padding=(1, 1), dtype="fp16")
EDSR = (
    Conv2dProblem(n=16, c_in=64, h=48, w=48, c_out=64, kernel=(3, 3), padding=(1, 1)),
    Conv2dProblem(n=1, c_in=64, h=256, w=256, c_out=64, kernel=(3, 3), padding=(1, 1)),
)
# Predicted µs on an H100 SXM (docs/tuning-log.md), written before the GPU measures.
INT8_PREDICTED_US = {"v1": 290.0, "v2": 47.0}
FP32_WORKSPACES = {"chunk24MiB": 24 * 1024 * 1024, "chunk256MiB": 256 * 1024 * 1024}
FP32_PREDICTED_US = {
    ("chunk24MiB", 0): 65.0,
    ("chunk24MiB", 1): 106.0,
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


def _fp32_call(problem: Conv2dProblem, workspace: int, device: str) -> Call:
    x, w, b = problem.make_inputs(seed=0, device=device)

    def call() -> object:
        with torch.no_grad():
            return ops.forward(x, w, b, *problem.conv_args(), workspace_bytes=workspace)

    return call


def _implicit_call(problem: Conv2dProblem, device: str) -> Call:
    x, w, b = problem.make_inputs(seed=0, device=device)

    def call() -> object:
        with torch.no_grad():
            return ops.implicit_forward(x, w, b, *problem.conv_args())

    return call


def cases() -> list[Case]:
    out = []
    for layout in ("nchw", "nhwc"):
        p = INT8_SEED.replace(layout=layout)
        for variant in ops.LSQ_VARIANTS:
            make = functools.partial(_lsq_call, p, variant)
            out.append(Case(FAMILY, f"lsq_{variant}", p.id, "forward", p.min_bytes, make,
                            INT8_PREDICTED_US[variant] if layout == "nchw" else None))  # fmt: skip
    for i, p in enumerate(EDSR):
        for name, workspace in FP32_WORKSPACES.items():
            make = functools.partial(_fp32_call, p, workspace)
            out.append(
                Case(FAMILY, name, p.id, "forward", p.min_bytes, make, FP32_PREDICTED_US.get((name, i)))
            )
        make = functools.partial(_implicit_call, p)
        out.append(
            Case(FAMILY, "implicit", p.id, "forward", p.min_bytes, make, FP32_PREDICTED_US[("implicit", i)])
        )
    return out
