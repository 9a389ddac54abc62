"""The depthwise sweep's cases: every variant on the seed shapes (kernels/depthwise/seed.py).

``v2`` (the default kernel) in fp32/fp16 x NCHW/NHWC x forward/input_grad/weight_grad; ``v1`` (the
first tiled kernel, ``CONVPERF_DEPTHWISE_VARIANT=v1``) where the switch changes the kernel: the NCHW
tiled forward and input gradient. A new variant adds its rows to :func:`cases`.
"""

from __future__ import annotations

from kernels.depthwise import ops
from kernels.depthwise.seed import DEPTHWISE_SEED_SHAPES
from kernels.sweep_calls import conv_case
from kernels.sweep_case import Case
from pytest_convperf.problem import Conv2dProblem

FAMILY = "depthwise"
VARIANT_ENV = "CONVPERF_DEPTHWISE_VARIANT"
DTYPES = ("fp32", "fp16")
LAYOUTS = ("nchw", "nhwc")
PHASES = ("forward", "input_grad", "weight_grad")


def seed_problem(n: int, c: int, hw: int, k: int, dtype: str, layout: str) -> Conv2dProblem:
    """A seed shape as the suite measures it (stride 1, padding k // 2, no bias)."""
    pad = (k // 2, k // 2)
    return Conv2dProblem(
        n=n,
        c_in=c,
        h=hw,
        w=hw,
        c_out=c,
        kernel=(k, k),
        padding=pad,
        groups=c,
        bias=False,
        dtype=dtype,
        layout=layout,
    )


def cases() -> list[Case]:
    out: list[Case] = []
    for shape in DEPTHWISE_SEED_SHAPES:
        for dtype in DTYPES:
            for layout in LAYOUTS:
                problem = seed_problem(*shape, dtype, layout)
                for phase in PHASES:
                    out.append(conv_case(FAMILY, "v2", ops.forward, problem, phase, env={VARIANT_ENV: "v2"}))
                    if layout == "nchw" and phase != "weight_grad":
                        out.append(
                            conv_case(FAMILY, "v1", ops.forward, problem, phase, env={VARIANT_ENV: "v1"})
                        )
    return out
