"""Correctness of a conv2d candidate against an fp64 oracle (docs/design.md §6): running it.

The oracle is ``F.conv2d`` in float64 on the *same already-rounded* inputs, so only the
candidate's own arithmetic is judged. How far off a result may be (the a-priori tolerance, the
worst-case bound, the rule against the reference's own error) is :mod:`pytest_convperf.correctness.tolerance`;
the report and its message are :mod:`pytest_convperf.correctness.correctness_report`. NaN/Inf never pass.

The reference (``F.conv2d`` on the problem's device by default) is judged by the same oracle:
when it misses even the worst-case bound and the candidate is right, :class:`ReferenceDefect` is
raised instead of blaming the candidate (PyTorch's CPU bf16 conv2d is wrong for some dilated,
strided shapes). When it only misses the a-priori tolerance (a long sequential fp32 sum, like
cuDNN's weight gradient over 65536 terms), it is a valid implementation, and the candidate passes
within the a-priori tolerance or within 2x the reference's own error.
"""

from __future__ import annotations

import math
import os
import traceback
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from pytest_convperf.core import inflight
from pytest_convperf.core.precision import ieee_fp32
from pytest_convperf.core.problem import Conv2dProblem, ConvInputs
from pytest_convperf.core.results import ErrorStats
from pytest_convperf.correctness.correctness_report import ConvMismatch, CorrectnessReport, ReferenceDefect
from pytest_convperf.correctness.known_defects import safe_reference
from pytest_convperf.correctness.tolerance import (
    TOLERANCES,
    error_stats,
    judge_against_reference,
    tolerance,
    worst_case_atol,
)

# Moved to their own modules (tolerance, correctness_report); importable from here as before.
__all__ = [
    "GRAD_NAMES",
    "TOLERANCES",
    "Candidate",
    "ConvMismatch",
    "CorrectnessReport",
    "ReferenceDefect",
    "assert_conv_close",
    "check_conv",
    "default_device",
    "describe",
    "error_stats",
    "make_grad_out",
    "output_errors",
    "poisoned_allocations",
    "raised",
    "reproduce",
    "stable_seed",
    "tolerance",
    "wrong_output",
]

Candidate = Callable[..., torch.Tensor]

GRAD_NAMES = ("grad_input", "grad_weight", "grad_bias")


def _max_abs(t: torch.Tensor | None) -> float:
    if t is None or t.numel() == 0:
        return 0.0
    return float(t.detach().abs().max().to(torch.float64))


@dataclass
class _Case:
    """Inputs and fp64 oracle values for one (problem, seed)."""

    inputs: ConvInputs
    grad_out: torch.Tensor | None
    expected: dict[str, torch.Tensor]
    tolerances: dict[str, tuple[float, float]]
    # The worst-case atol of each tensor (tolerance.worst_case_atol): what the reference must meet.
    ceilings: dict[str, float]


def _build_case(
    problem: Conv2dProblem,
    seed: int,
    device: str | torch.device,
    backward: bool,
    oracle: Candidate | None = None,
    inputs: ConvInputs | None = None,
) -> _Case:
    if inputs is None:
        inputs = problem.make_inputs(seed, device)
    x64 = inputs.input.detach().double().requires_grad_(backward)
    w64 = inputs.weight.detach().double().requires_grad_(backward)
    b64 = inputs.bias.detach().double().requires_grad_(backward) if inputs.bias is not None else None
    out64 = (oracle if oracle is not None else F.conv2d)(x64, w64, b64, *problem.conv_args())
    x_max, w_max = _max_abs(inputs.input), _max_abs(inputs.weight)
    b_max = _max_abs(inputs.bias)
    expected = {"output": out64.detach()}
    # name -> (reduction length K, scale: the product of the largest magnitudes entering it)
    sizes = {"output": (problem.reduction_length + 1, x_max * w_max + b_max)}
    grad_out: torch.Tensor | None = None
    if backward:
        grad_out = gy = make_grad_out(problem, seed, device)
        wrt = [x64, w64] + ([b64] if b64 is not None else [])
        grads = torch.autograd.grad(out64, wrt, gy.double(), allow_unused=True)
        g_max = _max_abs(gy)
        spatial = problem.n * problem.out_h * problem.out_w
        k_input = problem.multiplier * problem.kernel[0] * problem.kernel[1]
        expected["grad_input"] = grads[0]
        sizes["grad_input"] = (k_input, g_max * w_max)
        expected["grad_weight"] = grads[1]
        sizes["grad_weight"] = (spatial, g_max * x_max)
        if b64 is not None:
            expected["grad_bias"] = grads[2]
            sizes["grad_bias"] = (spatial, g_max)
    tolerances = {name: tolerance(problem.dtype, k, scale) for name, (k, scale) in sizes.items()}
    ceilings = {name: worst_case_atol(problem.dtype, k, scale) for name, (k, scale) in sizes.items()}
    return _Case(inputs, grad_out, expected, tolerances, ceilings)


def make_grad_out(problem: Conv2dProblem, seed: int, device: str | torch.device) -> torch.Tensor:
    """The output gradient of a check's gradient phases (seeded by ``seed + 1``, in the problem's
    layout): correctness checks the gradients with it and timing differentiates with it."""
    gen = torch.Generator().manual_seed(seed + 1)
    gy = torch.randn(problem.output_shape, generator=gen).to(device=device, dtype=problem.torch_dtype())
    return gy.contiguous(memory_format=torch.channels_last) if problem.layout == "nhwc" else gy


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


def _changed_inputs(case: _Case, given: Sequence[torch.Tensor | None]) -> str | None:
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


def _run(
    fn: Candidate, problem: Conv2dProblem, case: _Case, backward: bool
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


def _compare(results: dict[str, torch.Tensor], case: _Case, *, worst_case: bool = False) -> list[ErrorStats]:
    """Errors under the a-priori tolerances, or under the worst-case bounds (``worst_case``)."""
    stats = []
    for name, expected in case.expected.items():
        atol, rtol = case.tolerances[name]
        if worst_case:
            atol = case.ceilings[name]
        stats.append(error_stats(name, results[name], expected, atol=atol, rtol=rtol))
    return stats


def _judge_candidate(report: CorrectnessReport, results: dict[str, torch.Tensor], case: _Case) -> None:
    """Tier 3 (tolerance.judge_against_reference): a candidate tensor off the a-priori tolerance
    where the reference is off it too, but within its worst-case bound, may pass within 2x the
    reference's own error (and within that bound)."""
    references = {e.name: e for e in report.reference_errors}
    bounded = {e.name for e in report.reference_bounds if e.ok}
    for i, stats in enumerate(report.candidate_errors):
        ref = references.get(stats.name)
        if stats.ok or ref is None or ref.ok or stats.name not in bounded:
            continue
        ruling = judge_against_reference(
            results[stats.name],
            case.expected[stats.name],
            apriori=stats,
            reference=ref,
            ceiling=case.ceilings[stats.name],
            against=f"the reference's own {report.problem.dtype} error",
        )
        report.candidate_errors[i] = ruling.stats
        report.candidate_rules[stats.name] = ruling.rule


def output_errors(
    output: torch.Tensor,
    problem: Conv2dProblem,
    inputs: ConvInputs,
    *,
    seed: int,
    device: str | torch.device,
    oracle: Candidate | None = None,
) -> list[ErrorStats]:
    """Errors of a forward ``output`` the candidate already returned for ``inputs`` (the oracle's
    tolerance table); for outputs made outside :func:`check_conv` (``integrity``)."""
    case = _build_case(problem, seed, device, False, oracle, inputs)
    return _compare({"output": output.detach()}, case)


def describe(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of a callable (best effort; partials show their function)."""
    target = getattr(fn, "func", fn)
    if target is F.conv2d:
        return "torch.nn.functional:conv2d"
    module = getattr(target, "__module__", None) or "?"
    name = getattr(target, "__qualname__", None) or repr(target)
    return f"{module}:{name}"


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_conv(
    candidate: Candidate,
    problem: Conv2dProblem,
    *,
    reference: Candidate | None = None,
    seed: int = 0,
    device: str | torch.device | None = None,
    backward: bool = False,
    oracle: Candidate | None = None,
    inputs: ConvInputs | None = None,
) -> CorrectnessReport:
    """Run candidate and reference on seeded inputs and measure both against the fp64 oracle.

    ``inputs``: the inputs of ``seed`` when the caller built them already (a check shares one set
    between correctness, timing, memory and traces); built here otherwise.

    ``oracle`` replaces ``F.conv2d`` as the fp64 oracle: a callable with its signature, called on
    float64 copies of the inputs (e.g. the fake-quantized or pruned conv of a quantized/sparse
    variant, whose error against the float conv is by design). It must be differentiable for
    ``backward=True``. With an oracle the reference is not judged: it computes another function
    (typically the float conv the variant is timed against).
    """
    dev = str(device) if device is not None else default_device()
    asked: Candidate = reference if reference is not None else F.conv2d
    # A default reference on a path known to crash upstream is computed another way, and named.
    ref_fn, note = safe_reference(asked, problem, dev, weight_grad=backward)
    ref_name = describe(asked) if note is None else f"{describe(asked)} ({note})"
    report = CorrectnessReport(problem, seed, dev, backward, describe(candidate), ref_name)
    # On disk until it returns: a crash (segfault, abort) in any call below is named afterwards.
    with inflight.running(
        step="the correctness run",
        problem=problem.id,
        seed=seed,
        phase="forward+backward" if backward else "forward",
        candidate=report.candidate,
        reference=ref_name if oracle is None else None,
        oracle=describe(oracle) if oracle is not None else None,
        repro=report.repro(),
    ):
        return _check_conv(report, candidate, ref_fn, problem, seed, dev, backward, oracle, inputs)


def _check_conv(
    report: CorrectnessReport,
    candidate: Candidate,
    ref_fn: Candidate,
    problem: Conv2dProblem,
    seed: int,
    dev: str,
    backward: bool,
    oracle: Candidate | None,
    inputs: ConvInputs | None,
) -> CorrectnessReport:
    case = _build_case(problem, seed, dev, backward, oracle, inputs)
    results, report.candidate_exception, report.candidate_wrong = _run(candidate, problem, case, backward)
    if results:
        report.candidate_errors = _compare(results, case)
    if oracle is None:  # a custom oracle computes another function than the (timing) reference
        ref_results, report.reference_exception, report.reference_wrong = _run(
            ref_fn, problem, case, backward
        )
        if ref_results:
            report.reference_errors = _compare(ref_results, case)
            report.reference_bounds = _compare(ref_results, case, worst_case=True)
        if results and ref_results:
            _judge_candidate(report, results, case)
    return report


def assert_conv_close(
    candidate: Candidate,
    problem: Conv2dProblem,
    *,
    reference: Candidate | None = None,
    seed: int | None = None,
    backward: bool = False,
    device: str | torch.device | None = None,
    oracle: Candidate | None = None,
) -> CorrectnessReport:
    """Assert the candidate matches the fp64 oracle on ``problem``; return the report.

    ``oracle`` replaces ``F.conv2d`` as the fp64 oracle (see :func:`check_conv`).

    Raises :class:`ConvMismatch` when the candidate is wrong, :class:`ReferenceDefect` when only
    the reference is wrong (outside the worst-case bound: ``tolerance.worst_case_atol``); a
    reference off only the a-priori tolerance is valid and raises nothing. ``seed=None`` derives
    a seed from the problem id so reruns repeat.
    """
    if seed is None:
        seed = stable_seed(problem)
    report = check_conv(
        candidate, problem, reference=reference, seed=seed, device=device, backward=backward, oracle=oracle
    )
    if not report.ok:
        raise ConvMismatch(report)
    if not report.reference_ok:
        raise ReferenceDefect(report)
    return report


def stable_seed(problem: Conv2dProblem) -> int:
    """The recorded seed of a problem's inputs: a hash of its id, so reruns repeat."""
    return zlib.crc32(problem.id.encode()) & 0x7FFFFFFF


def reproduce(
    candidate: str, problem_id: str, *, seed: int, backward: bool = False, device: str | None = None
) -> CorrectnessReport:
    """Re-run a failed check from its repro line: ``candidate`` is ``module:qualname``."""
    import importlib

    module_name, _, qualname = candidate.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    report = check_conv(
        target, Conv2dProblem.from_id(problem_id), seed=seed, device=device, backward=backward
    )
    print(report.message())
    return report
