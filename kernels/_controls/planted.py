"""A planted slowdown of the depthwise forward, for proving on a GPU that the night catches one.

A control, not a kernel: :func:`candidate` swaps the depthwise suite's candidate (``perf_tests``'
``depthwise_candidate``) for its planted twin here, :func:`forward` (around
``kernels.depthwise.ops.forward``) or :func:`reference_forward` (around
``kernels.depthwise.reference.forward``, so CI can measure it on a CPU), only when the switch is on:
``CONVPERF_PLANTED_SLOWDOWN=<fraction>`` (the planted night) or :data:`HARDWIRED` (the GPU window's
A/B scratch commit: ``scripts/gpu_window.py``). The kernels' own forward calls never read the switch.

A twin runs the op once more first, without autograd, on a copy of a leading share ``fraction`` of
its input (the batch when it has enough samples, else the rows). So the extra device work is real
(the same kernel, named as itself by the kernel diff) and calibrated by construction: about
``fraction`` more bytes read cold and written, and arithmetic. On a launch-bound call (a few us) the
extra launch costs more than its share; the summary of the window reports the ratio measured.
Gradients are untouched (the extra call is outside the autograd graph), so only forward checks slow.

The twins read the switch on every call: on the A/B's REF side (this file at the base commit,
:data:`HARDWIRED` unset) a twin is the plain op, so HEAD's hard-wired twin is timed against it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import torch

from kernels.conv_args import IntPair, Padding
from kernels.depthwise import ops, reference
from kernels.depthwise.reference import DepthwiseArgs, depthwise_args

ENV = "CONVPERF_PLANTED_SLOWDOWN"
# The A/B's SLOWER side of the GPU window sets this in a scratch commit; never set in the repository.
HARDWIRED: float | None = None

Candidate = Callable[..., torch.Tensor]


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


def _twin(plain: Candidate, name: str) -> Candidate:
    """``plain`` (an ``F.conv2d``-signature forward) after :func:`extra_work`: ``plain`` itself on the
    share of the input, with the call's own weight, bias and checked geometry. Named ``name`` in this
    module, so the A/B finds REF's twin by name."""

    def twin(
        input: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        stride: IntPair = 1,
        padding: Padding = 0,
        dilation: IntPair = 1,
        groups: int = 1,
    ) -> torch.Tensor:
        if fraction() is not None:  # off (the A/B's REF side): not even the argument check runs twice
            a = depthwise_args(input, weight, bias, stride, padding, dilation, groups)
            geometry = (a.stride, a.padding, a.dilation)
            extra_work(lambda x: plain(x, weight, bias, *geometry, groups), a, weight)
        return plain(input, weight, bias, stride, padding, dilation, groups)

    twin.__module__, twin.__name__, twin.__qualname__ = __name__, name, name
    twin.__doc__ = (
        f"``{plain.__module__}.{plain.__qualname__}``, after the planted extra work when the switch is on."
    )
    return twin


forward = _twin(ops.forward, "forward")
reference_forward = _twin(reference.forward, "reference_forward")

# Each plain candidate and its planted twin (module-level functions: the A/B finds REF's by name).
_TWINS: dict[Candidate, Candidate] = {ops.forward: forward, reference.forward: reference_forward}


def candidate(plain: Candidate) -> Candidate:
    """``plain``'s planted twin when the switch is on (a bad value raises, naming the variable), else
    ``plain`` itself: the suite calls this once per test, so a night without the switch times the
    kernels exactly as they are."""
    if fraction() is None:
        return plain
    twin = _TWINS.get(plain)
    if twin is None:
        names = ", ".join(f"{f.__module__}.{f.__qualname__}" for f in _TWINS)
        raise ValueError(
            f"{ENV} is set, but the planted slowdown has no twin of {plain!r}; it has of {names}"
        )
    return twin
