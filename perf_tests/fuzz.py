"""The small random conv2d problems the im2col+GEMM and PCILT fuzz checks draw (tests and perf_tests)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from pytest_convperf import Conv2dProblem, conv2d_problems


def small_problems(**overrides: Any) -> st.SearchStrategy[Conv2dProblem]:
    """``conv2d_problems`` bounded to at most 8192 elements, 8 channels, batch 3, 9x9 outputs,
    4 groups, kernels 1..5 and dilations 1, 2 (``overrides`` add or replace keyword arguments)."""
    kwargs: dict[str, Any] = {
        "max_elements": 8192,
        "max_channels": 8,
        "max_multiplier": 2,
        "max_batch": 3,
        "max_out_size": 9,
        "max_groups": 4,
        "kernel_sizes": (1, 2, 3, 4, 5),
        "dilations": (1, 2),
    }
    return conv2d_problems(**{**kwargs, **overrides})
