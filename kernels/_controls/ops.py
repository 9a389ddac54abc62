"""CUDA negative controls (``controls.cu``): the same defects as ``cpu.py``, as real kernels.

Forward only (no autograd). The CUDA ``noop`` returns ``torch.empty`` memory untouched, exactly like
a kernel that never launched: the caching allocator may hand back a block that still holds an earlier
result, which is why a correctness check must run the candidate before the reference or poison outputs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from kernels import _build
from kernels.depthwise.reference import IntPair, Padding, depthwise_args

Candidate = Callable[..., torch.Tensor]


def _run(
    mode: str,
    slow_fraction: float,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: IntPair,
    padding: Padding,
    dilation: IntPair,
    groups: int,
) -> torch.Tensor:
    a = depthwise_args(input, weight, bias, stride, padding, dilation, groups)
    if a.input.device.type != "cuda":
        raise ValueError(f"CUDA controls need CUDA tensors (got {a.input.device}); use kernels._controls.cpu")
    _build.load("_controls")
    out: torch.Tensor = torch.ops.convperf_controls.forward(
        a.input, weight, bias, list(a.stride), list(a.padding), list(a.dilation), mode, slow_fraction
    )
    return out.squeeze(0) if a.unbatched else out


def _candidate(mode: str, slow_fraction: float = 0.0) -> Candidate:
    def candidate(
        input: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        stride: IntPair = 1,
        padding: Padding = 0,
        dilation: IntPair = 1,
        groups: int = 1,
    ) -> torch.Tensor:
        return _run(mode, slow_fraction, input, weight, bias, stride, padding, dilation, groups)

    name = mode if not slow_fraction else f"slowed_{slow_fraction:g}"
    candidate.__name__ = candidate.__qualname__ = name
    return candidate


noop = _candidate("noop")
wrong_border = _candidate("wrong_border")
wrong_odd_stride2 = _candidate("wrong_odd_stride2")
correct = _candidate("correct")


@functools.cache
def slowed(fraction: float) -> Candidate:
    """A correct CUDA candidate that recomputes ``ceil(fraction * N * C)`` planes once more."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction} must be in (0, 1]")
    return _candidate("correct", fraction)
