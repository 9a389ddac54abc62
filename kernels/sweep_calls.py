"""Prepared calls for sweep cases: one phase of a conv2d-signature function on a problem's inputs.

The families' ``sweep_plan.py`` build their :class:`kernels.sweep_case.Case` rows with
:func:`conv_case`; the sweep builds its cuDNN anchors with the same function over ``F.conv2d``, so a
variant and its anchor run the same phase the same way. Inputs, the forward graph of a gradient
phase and the gradient seed are made outside the timed call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import torch

from kernels.sweep_case import Call, Case
from pytest_convperf import Conv2dProblem

ConvFn = Callable[..., torch.Tensor]
PHASES = ("forward", "input_grad", "weight_grad", "backward")
SEED = 0


def phase_bytes(problem: Conv2dProblem, phase: str) -> int:
    """The fewest bytes the phase must move: forward, input_grad and weight_grad each read two of
    input / weight / output-sized tensors and write the third (the problem's ``min_bytes``);
    backward does both gradients (twice that)."""
    return problem.min_bytes * (2 if phase == "backward" else 1)


def conv_call(
    fn: ConvFn, problem: Conv2dProblem, phase: str, env: Mapping[str, str] | None = None
) -> Callable[[str], Call]:
    """``device -> call`` running ``phase`` of ``fn(x, w, b, stride, padding, dilation, groups)``.

    ``env`` is set before every call (a run-time variant switch such as
    ``CONVPERF_DEPTHWISE_VARIANT``, read by the op on each call): a host-side write, enqueued while
    the device still flushes L2 before the timed region.
    """
    if phase not in PHASES:
        raise ValueError(f"phase={phase!r} is not a sweep phase; use one of {', '.join(PHASES)}")
    settings = dict(env or {})

    def make(device: str) -> Call:
        os.environ.update(settings)
        x, w, b = problem.make_inputs(SEED, device)
        args = problem.conv_args()
        if phase == "forward":

            def forward() -> object:
                os.environ.update(settings)
                with torch.no_grad():
                    return fn(x, w, b, *args)

            return forward
        wants = {"input_grad": (x,), "weight_grad": (w,), "backward": (x, w)}[phase]
        for t in wants:
            t.requires_grad_(True)
        out = fn(x, w, b, *args)
        grad = torch.randn_like(out)

        def gradient() -> object:
            os.environ.update(settings)
            return torch.autograd.grad(out, wants, grad, retain_graph=True)

        return gradient

    return make


def conv_case(
    family: str,
    variant: str,
    fn: ConvFn,
    problem: Conv2dProblem,
    phase: str,
    *,
    env: Mapping[str, str] | None = None,
    predicted_us: float | None = None,
) -> Case:
    """One :class:`Case`: ``fn`` on ``problem`` in ``phase``, its bytes from :func:`phase_bytes`."""
    return Case(
        family=family,
        variant=variant,
        problem_id=problem.id,
        phase=phase,
        bytes_moved=phase_bytes(problem, phase),
        make_call=conv_call(fn, problem, phase, env),
        predicted_us=predicted_us,
    )
