"""Problem shapes of the suite: the depthwise seed's 8 shapes and CPU scaling (others may append).

The seed shapes themselves are in ``kernels/depthwise/seed.py``.
On a CPU the batch is scaled down so a CPU run stays fast; the problem id carries the real batch
(``n1-...``) and reports say the shapes were scaled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

# The seed's shapes (and their problems) live with the kernels tuned for them; the suite builds on them.
from kernels.depthwise.seed import DEPTHWISE_SEED_SHAPES as DEPTHWISE_SEED_SHAPES
from kernels.depthwise.seed import depthwise_seed_problem as depthwise_seed_problem
from pytest_convperf import Conv2dProblem, conv2d_problems

CPU_BATCH = 1
# What the depthwise kernels take: every dtype and layout they support.
DEPTHWISE_DTYPES = ("fp32", "fp16", "bf16")
DEPTHWISE_LAYOUTS = ("nchw", "nhwc")


def depthwise_problems(
    *,
    dtypes: Sequence[str] = DEPTHWISE_DTYPES,
    layouts: Sequence[str] = DEPTHWISE_LAYOUTS,
    **bounds: Any,
) -> st.SearchStrategy[Conv2dProblem]:
    """Depthwise problems with channel multiplier 1 (the kernels' domain), in every supported dtype and
    layout unless narrowed; ``bounds`` (sizes, kernels, strides, ...) go to ``conv2d_problems``."""
    return conv2d_problems(kinds=("depthwise",), dtypes=dtypes, layouts=layouts, max_multiplier=1, **bounds)


def depthwise_seed_problems(*, dtype: str = "fp32", layout: str = "nchw") -> list[Conv2dProblem]:
    """The seed's 8 shapes at full size."""
    return [depthwise_seed_problem(*s, dtype=dtype, layout=layout) for s in DEPTHWISE_SEED_SHAPES]


def seed_label(problem: Conv2dProblem) -> str:
    """The seed's way of naming a shape: ``16 x 32 x 112 x 112, kernel 3``."""
    return f"{problem.n} x {problem.c_in} x {problem.h} x {problem.w}, kernel {problem.kernel[0]}"


def short_id(shape: tuple[int, int, int, int]) -> str:
    """A test id for a seed shape: ``16x32x112-k3``."""
    n, c, hw, k = shape
    return f"{n}x{c}x{hw}-k{k}"


def measured_shapes(device_kind: str) -> list[tuple[int, int, int, int]]:
    """The seed shapes as a run on ``device_kind`` measures them (batch scaled on a CPU, as
    :func:`scaled_for`): test ids built from these name the problem that ran."""
    if device_kind == "cuda":
        return list(DEPTHWISE_SEED_SHAPES)
    return [(min(n, CPU_BATCH), c, hw, k) for n, c, hw, k in DEPTHWISE_SEED_SHAPES]


def scaled_for(problem: Conv2dProblem, device_kind: str) -> Conv2dProblem:
    """On a CPU, the same problem with batch ``min(n, CPU_BATCH)``; on a GPU, unchanged."""
    if device_kind == "cuda" or problem.n <= CPU_BATCH:
        return problem
    return problem.replace(n=CPU_BATCH)
