"""The depthwise seed's shapes: the problems the depthwise kernels are tuned for.

Seed 001 (samson-wang/dwconv, pytorch/pytorch#18631): NCHW, stride 1, "same" padding, groups = C.
They live with the kernels so the cost model (``model.py``), the SASS report and the sweep plan need
nothing from the suite; ``perf_tests.shapes`` builds the suite's problems from them.
"""

from __future__ import annotations

from pytest_convperf import Conv2dProblem

# (N, C, H = W, k) in the seed's order.
DEPTHWISE_SEED_SHAPES: tuple[tuple[int, int, int, int], ...] = (
    (16, 32, 112, 3),
    (16, 144, 56, 3),
    (16, 240, 28, 5),
    (16, 480, 14, 3),
    (16, 480, 14, 5),
    (16, 672, 14, 5),
    (16, 1152, 7, 5),
    (16, 1152, 7, 3),
)


def depthwise_seed_problem(
    n: int, c: int, hw: int, k: int, *, dtype: str = "fp32", layout: str = "nchw"
) -> Conv2dProblem:
    """One seed shape as a depthwise problem (stride 1, padding k // 2, no bias, like the seed)."""
    return Conv2dProblem(
        n=n,
        c_in=c,
        h=hw,
        w=hw,
        c_out=c,
        kernel=(k, k),
        padding=(k // 2, k // 2),
        groups=c,
        bias=False,
        dtype=dtype,
        layout=layout,
    )


# EfficientNet-B0's stride-2 depthwise layers at seed 004's batch (8 x 3 x 224 x 224), as (N, C, H = W,
# k); stride 2, padding k // 2. v3's grids cover 2.0, 1.5, 0.32 and 0.38 waves of an H100's resident
# blocks on them (issue 29: grids that under-fill 132 SMs).
EFFICIENTNET_B0_STRIDE2: tuple[tuple[int, int, int, int], ...] = (
    (8, 96, 112, 3),
    (8, 144, 56, 5),
    (8, 240, 28, 3),
    (8, 672, 14, 5),
)
