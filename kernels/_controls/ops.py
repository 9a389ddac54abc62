"""CUDA negative controls (``controls.cu``): the same defects as ``cpu.py``, as real kernels.

Forward only (no autograd). The CUDA ``noop`` returns ``torch.empty`` memory untouched, exactly like
a kernel that never launched: the caching allocator may hand back a block that still holds an earlier
result, which is why a correctness check must run the candidate before the reference or poison outputs.
"""

from __future__ import annotations

import functools

import torch

from kernels import _build
from kernels._controls.candidate import Candidate, conv2d_candidate
from kernels.depthwise.reference import DepthwiseArgs


def _candidate(mode: str, slow_fraction: float = 0.0) -> Candidate:
    def run(a: DepthwiseArgs, weight: torch.Tensor, bias: torch.Tensor | None, groups: int) -> torch.Tensor:
        if a.input.device.type != "cuda":
            raise ValueError(
                f"CUDA controls need CUDA tensors (got {a.input.device}); use kernels._controls.cpu"
            )
        _build.load("_controls")
        out: torch.Tensor = getattr(torch.ops, _build.namespace("_controls")).forward(
            a.input, weight, bias, list(a.stride), list(a.padding), list(a.dilation), mode, slow_fraction
        )
        return out

    return conv2d_candidate(run, mode if not slow_fraction else f"slowed_{slow_fraction:g}")


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
