"""A planted slowdown of the depthwise forward, for proving on a GPU that the night catches one.

Off unless ``CONVPERF_PLANTED_SLOWDOWN=<fraction>`` is set (or :data:`HARDWIRED` is, which only the
GPU window's scratch commit does: ``scripts/gpu_window.py``, phase ``planted``). When on, every
forward call runs its own op once more, without autograd, on a copy of a leading share ``fraction``
of its input (the batch when it has enough samples, else the rows). So the extra device work is
real (the same kernel, named as itself by the kernel diff) and calibrated by construction: about
``fraction`` more bytes read cold and written, and arithmetic. On a launch-bound call (a few us) the
extra launch costs more than its share; the summary of the window reports the ratio measured.

Gradients are untouched (the extra call is outside the autograd graph), so only forward checks
slow down, in every test whose candidate calls ``kernels.depthwise.ops.forward`` (or, on a CPU,
``kernels.depthwise.reference.forward``, which honours the switch too so CI can measure it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # reference.py imports this module: no import back at run time
    from kernels.depthwise.reference import DepthwiseArgs

ENV = "CONVPERF_PLANTED_SLOWDOWN"
# The A/B's SLOWER side of the GPU window sets this in a scratch commit; never set in the repository.
HARDWIRED: float | None = None


def fraction() -> float | None:
    """The share of extra work asked for, or None when the switch is off (the default).

    Raises ``ValueError`` naming the variable for a value that is not a number in (0, 1].
    """
    if HARDWIRED is not None:
        return HARDWIRED
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        share = float(raw)
    except ValueError:
        share = math.nan
    if not (math.isfinite(share) and 0.0 < share <= 1.0):
        raise ValueError(
            f"{ENV}={raw!r} must be a fraction in (0, 1] (0.1: about 10 % more work per depthwise "
            f"forward); unset it to turn the planted slowdown off"
        )
    return share


def share_of(args: DepthwiseArgs, weight: torch.Tensor, share: float) -> torch.Tensor:
    """A private copy of the leading ``share`` of the input (the batch if it has >= 1/share samples,
    else rows), made on the first call of each geometry and reused.

    A copy, not a view: the timer flushes L2 before each call, so the extra call reads its share cold
    from memory as the real call does, instead of warming the lines the real call reads next. Rows
    are never fewer than the dilated kernel needs past the padding, so the slice is a valid call.
    """
    x = args.input.detach()
    n = x.shape[0]
    if n * share >= 1.0:
        part = x[: max(1, round(n * share))]
    else:
        kernel_rows = args.dilation[0] * (int(weight.shape[2]) - 1) + 1
        fewest = max(1, kernel_rows - 2 * args.padding[0])
        part = x[:, :, : min(x.shape[2], max(fewest, round(x.shape[2] * share)))]
    key = (tuple(x.shape), x.stride(), x.dtype, x.device, share, tuple(weight.shape), args.padding)
    if key not in _SCRATCH:
        layout = torch.channels_last if _channels_last(x) else torch.contiguous_format
        _SCRATCH[key] = part.clone(memory_format=layout)
    return _SCRATCH[key]


def _channels_last(t: torch.Tensor) -> bool:
    return not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


# One copy per geometry (a few per test session; the share of one input each).
_SCRATCH: dict[tuple[object, ...], torch.Tensor] = {}


def extra_work(run: Callable[[torch.Tensor], object], args: DepthwiseArgs, weight: torch.Tensor) -> None:
    """When the switch is on: ``run`` (the caller's own op with its weight and geometry) once more on
    :func:`share_of` the input, outside autograd. Off: nothing (one environment read)."""
    share = fraction()
    if share is None:
        return
    with torch.no_grad():
        run(share_of(args, weight, share))
