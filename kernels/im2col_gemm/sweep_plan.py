"""The im2col+GEMM sweep's cases: every variant on the suite's problems (LeNet seed, EDSR, int8 goal).

Variants: ``gemm`` (fp32 im2col + cuBLAS), ``quantized`` (LSQ int8, ``torch._int_mm``), ``sparse``
(unstructured, density 0.5, cuSPARSE), ``sparse_struct`` (filter pruning, density 0.5) and, on fp16
problems, ``sparse_2to4`` (semi-structured). Forward and backward, as the suite times them. A new
variant adds its rows to :func:`cases`.
"""

from __future__ import annotations

import functools

import torch

from kernels.im2col_gemm import ops
from kernels.quant import lsq_init_step
from kernels.sweep_calls import ConvFn, conv_case
from kernels.sweep_case import Case
from pytest_convperf.problem import Conv2dProblem

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


def cases() -> list[Case]:
    out: list[Case] = []
    for problem in PROBLEMS:
        variants = dict(VARIANTS)
        if problem.dtype == "fp16":  # 2:4 needs fp16/bf16 (to_sparse_semi_structured)
            variants["sparse_2to4"] = functools.partial(ops.structured_forward, pattern="2:4")
        for name, fn in variants.items():
            for phase in PHASES:
                out.append(conv_case(FAMILY, name, fn, problem, phase))
    return out
