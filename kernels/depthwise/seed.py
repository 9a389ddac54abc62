"""The depthwise seed's shapes: the problems the depthwise kernels are tuned for.

Seed 001 (samson-wang/dwconv, pytorch/pytorch#18631): NCHW, stride 1, "same" padding, groups = C.
They live with the kernels so the cost model (``model.py``) and the SASS report need nothing from the
suite; ``perf_tests.shapes`` builds the suite's problems from them.
"""

from __future__ import annotations

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
