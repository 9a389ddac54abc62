"""Correctness of a conv2d candidate against an fp64 oracle (docs/design.md §6): running it.

The oracle is ``F.conv2d`` in float64 on the *same already-rounded* inputs, so only the
candidate's own arithmetic is judged. How far off a result may be (the a-priori tolerance, the
worst-case bound, the rule against the reference's own error) is :mod:`pytest_convperf.correctness.tolerance`;
the report and its message are :mod:`pytest_convperf.correctness.correctness_report`; the oracle's values
of one (problem, seed) are :mod:`pytest_convperf.correctness.case`, one guarded call of a candidate
:mod:`pytest_convperf.correctness.candidate_run`. NaN/Inf never pass.

The reference (``F.conv2d`` on the problem's device by default) is judged by the same oracle:
when it misses even the worst-case bound and the candidate is right, :class:`ReferenceDefect` is
raised instead of blaming the candidate (PyTorch's CPU bf16 conv2d is wrong for some dilated,
strided shapes). When it only misses the a-priori tolerance (a long sequential fp32 sum, like
cuDNN's weight gradient over 65536 terms), it is a valid implementation, and the candidate passes
within the a-priori tolerance or within 2x the reference's own error.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from pytest_convperf.core import inflight
from pytest_convperf.core.problem import Conv2dProblem, ConvInputs
from pytest_convperf.correctness.candidate_run import run_case
from pytest_convperf.correctness.case import Candidate, Case, build_case
from pytest_convperf.correctness.correctness_report import ConvMismatch, CorrectnessReport, ReferenceDefect
from pytest_convperf.correctness.known_defects import safe_reference
from pytest_convperf.correctness.tolerance import (
    judge_against_reference,
)

# Moved to their own modules (case, candidate_run, tolerance, correctness_report); importable
# from here as before.
__all__ = ["assert_conv_close", "check_conv", "default_device", "describe", "reproduce", "stable_seed"]


def _judge_candidate(report: CorrectnessReport, results: dict[str, torch.Tensor], case: Case) -> None:
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
    candidate_name, asked_name = describe(candidate), describe(asked)
    oracle_name = describe(oracle) if oracle is not None else None
    # A default reference on a path known to crash upstream is computed another way, and named.
    ref_fn, note = safe_reference(asked, problem, dev, weight_grad=backward)
    ref_name = asked_name if note is None else f"{asked_name} ({note})"
    report = CorrectnessReport(problem, seed, dev, backward, candidate_name, ref_name)
    # On disk until it returns: a crash (segfault, abort) in any call below is named afterwards.
    with inflight.running(
        step="the correctness run",
        problem=problem.id,
        seed=seed,
        phase="forward+backward" if backward else "forward",
        candidate=report.candidate,
        reference=ref_name if oracle is None else None,
        oracle=oracle_name,
        repro=report.repro(),
    ):
        if inputs is None:
            inputs = problem.make_inputs(seed, dev)
        case = build_case(problem, inputs, seed, dev, backward, oracle)
        results, report.candidate_exception, report.candidate_wrong = run_case(
            candidate, problem, case, backward
        )
        if results:
            report.candidate_errors = case.errors(results)
        if oracle is None:  # a custom oracle computes another function than the (timing) reference
            ref_results, report.reference_exception, report.reference_wrong = run_case(
                ref_fn, problem, case, backward
            )
            if ref_results:
                report.reference_errors = case.errors(ref_results)
                report.reference_bounds = case.errors(ref_results, worst_case=True)
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
