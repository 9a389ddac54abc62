"""One call of a candidate (or the reference) on a check's case, guarded: fresh copies of the
inputs, fresh allocations poisoned with NaN, fp32 pinned to IEEE; what it returns checked (a
tensor of the oracle's shape and the problem's dtype) and its inputs checked untouched; an
exception it raises kept as a message with the user's part of the traceback."""

from __future__ import annotations

import math
import os
import traceback
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext

import torch

from pytest_convperf.core.precision import ieee_fp32
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.case import GRAD_NAMES, Candidate, Case


@contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Every fresh floating-point tensor (``torch.empty``, ``empty_like``, ``at::empty`` in an
    extension) is filled with NaN while this is active.

    Without it a kernel that writes nothing can pass: the caching allocator may hand it the block
    of an earlier right answer. Torch does the fill in deterministic mode
    (``torch.utils.deterministic.fill_uninitialized_memory``); ``warn_only`` keeps ops without a
    deterministic implementation running (their warning is silenced here: it is about this
    switch, not the candidate). The caller's settings are restored on exit.
    """
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have a deterministic implementation.*")
            yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]


def wrong_output(name: str, actual: object, expected: torch.Tensor, dtype: torch.dtype) -> str | None:
    """Why ``actual`` is not a tensor of ``expected``'s shape and of ``dtype``, or None."""
    if not isinstance(actual, torch.Tensor):
        return f"{name}: the candidate returned {type(actual).__name__}, not a torch.Tensor"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"{name} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)} (the oracle's)"
    if actual.dtype != dtype:
        return f"{name} has dtype {actual.dtype}, expected {dtype} (the problem's)"
    return None


def _changed_inputs(case: Case, given: Sequence[torch.Tensor | None]) -> str | None:
    """Which inputs the candidate wrote in place (compared with the check's own inputs)."""
    changed = [
        name
        for name, original, seen in zip(("input", "weight", "bias"), case.inputs, given)
        if original is not None and seen is not None and not torch.equal(original, seen.detach())
    ]
    if not changed:
        return None
    return (
        f"the candidate changed its {' and '.join(changed)} in place; a conv must leave its inputs "
        "as they are (the calls timed after it, the reference's too, would see the changed values)"
    )


def run_case(
    fn: Candidate, problem: Conv2dProblem, case: Case, backward: bool
) -> tuple[dict[str, torch.Tensor], str | None, str | None]:
    """Call ``fn`` (and its backward) on fresh copies of the inputs, with fresh allocations poisoned.

    Returns (outputs, the exception it raised, what is wrong with its outputs or inputs)."""
    x = case.inputs.input.detach().clone().requires_grad_(backward)
    w = case.inputs.weight.detach().clone().requires_grad_(backward)
    b = case.inputs.bias.detach().clone().requires_grad_(backward) if case.inputs.bias is not None else None
    pin = ieee_fp32() if problem.dtype == "fp32" else nullcontext()
    dtype = problem.torch_dtype()
    try:
        with pin, poisoned_allocations():
            out = fn(x, w, b, *problem.conv_args())
            # Before the backward: autograd's own shape error would hide what is wrong.
            wrong = wrong_output("output", out, case.expected["output"], dtype) or _changed_inputs(
                case, (x, w, b)
            )
            if wrong is not None:
                return {}, None, wrong
            results = {"output": out.detach()}
            if backward:
                assert case.grad_out is not None
                wrt = [x, w] + ([b] if b is not None else [])
                grads = torch.autograd.grad(out, wrt, case.grad_out, allow_unused=True)
                for name, grad, ref in zip(GRAD_NAMES, grads, wrt):
                    results[name] = grad.detach() if grad is not None else torch.full_like(ref, math.nan)
    except Exception as exc:  # a crashing candidate is a correctness failure with its own message
        return {}, raised(exc), None
    for name, value in results.items():
        wrong = wrong_output(name, value, case.expected[name], dtype)
        if wrong is not None:
            return {}, None, wrong
    return results, None, None


def raised(exc: BaseException) -> str:
    """``raised ValueError: boom`` and the traceback from the first frame outside this plugin: the
    path into the user's code, without the plugin's own call sites (correctness, timing rounds)."""
    plugin_dir = os.path.dirname(__file__) + os.sep
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(plugin_dir):
        tb = tb.tb_next
    trace = "".join(traceback.format_list(traceback.extract_tb(tb))) if tb is not None else ""
    head = f"raised {type(exc).__name__}: {exc}"
    return f"{head}\n  Traceback (most recent call last):\n{trace.rstrip()}" if trace else head
