"""The ``F.conv2d``-signature wrapper shared by the CPU (``cpu.py``) and CUDA (``ops.py``) controls."""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernels.conv_args import IntPair, Padding
from kernels.depthwise.reference import DepthwiseArgs, depthwise_args

Candidate = Callable[..., torch.Tensor]
# body(args, weight, bias, groups) -> a batched (4-D) output
Body = Callable[[DepthwiseArgs, torch.Tensor, torch.Tensor | None, int], torch.Tensor]


def conv2d_candidate(body: Body, name: str) -> Candidate:
    """Wrap ``body`` as a conv2d candidate named ``name``: validate and normalise the arguments with
    ``depthwise_args``, run ``body`` on the batched input, and drop the batch dim again for 3-D input.
    The candidate's docstring is ``body``'s."""

    def candidate(
        input: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        stride: IntPair = 1,
        padding: Padding = 0,
        dilation: IntPair = 1,
        groups: int = 1,
    ) -> torch.Tensor:
        a = depthwise_args(input, weight, bias, stride, padding, dilation, groups)
        out = body(a, weight, bias, groups)
        return out.squeeze(0) if a.unbatched else out

    candidate.__name__ = candidate.__qualname__ = name
    # Named where ``body`` lives (``kernels._controls.cpu.noop``): the A/B finds REF's twin by module + name.
    candidate.__module__ = body.__module__
    candidate.__doc__ = body.__doc__
    return candidate
