"""The paired timing of one check: the facts taken once, the first measurement, its confirm.

:func:`time_pair` measures a candidate against its reference on the check's inputs (under the
timing slot and the perf settings of :mod:`pytest_convperf.check.calls`), and returns the first
:class:`~pytest_convperf.core.results.Comparison` with ``confirm(n_rounds)``, which re-times the same
pair with that many rounds (the confirm run is asked for in rounds from end to end). Every
comparison passes the roofline sanity check (:func:`sanity`): a time under half the floor is
:class:`ImplausibleTime`, and the floors are added as facts (``Comparison.with_facts``, never mutating).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch.nn.functional as F

from pytest_convperf.check.calls import InputSets, memory_facts, perf_settings, reference_facts
from pytest_convperf.check.context import Candidate
from pytest_convperf.check.faults import device_errors
from pytest_convperf.core.results import Comparison
from pytest_convperf.core.roofline import roofline_facts
from pytest_convperf.correctness.known_defects import safe_reference
from pytest_convperf.measure.parallel import timing_slot
from pytest_convperf.measure.rounds import StopRule, Workload, measure_pair

if TYPE_CHECKING:
    import pytest

    from pytest_convperf.check.context import CheckContext
    from pytest_convperf.core.device import DeviceInfo
    from pytest_convperf.core.problem import Conv2dProblem, ConvInputs
    from pytest_convperf.measure.timers import Timer

__all__ = ["ImplausibleTime", "TimedPair", "first_and_confirm", "sanity", "slotted_pair", "time_pair"]


class ImplausibleTime(AssertionError):
    """A measured time below half the roofline floor: the kernel cannot have done its work."""


@dataclasses.dataclass(frozen=True)
class TimedPair:
    """A first measurement, ``confirm(n_rounds)``, and the candidate's last timed call of the
    first measurement (its inputs, its output) for
    :func:`pytest_convperf.correctness.integrity.after_timing`."""

    first: Comparison
    confirm: Callable[[int], Comparison]
    last_output: tuple[ConvInputs, object] | None


def time_pair(
    ctx: CheckContext,
    *,
    reference: Candidate | None = None,
    rule: StopRule | None = None,
    stored_mode: str | None = None,
) -> TimedPair:
    """Measure ``ctx.candidate`` against a reference once; ``confirm(n_rounds)`` re-times with
    ``n_rounds`` rounds, on the check's inputs (``ctx.inputs``, set 0) in ``ctx.mode``.

    ``reference``: what the candidate is timed against when not the check's (REF's candidate in
    an A/B); ``stored_mode``: the entry's timing mode, which ``auto`` reuses (the confirm reuses the
    first run's: never mixed)."""
    problem, phase, device, timer, seed = ctx.problem, ctx.phase, ctx.device, ctx.timer, ctx.seed
    config, nodeid, candidate, mode = ctx.config, ctx.nodeid, ctx.candidate, ctx.mode
    reference = reference if reference is not None else ctx.reference
    # A default reference on a path known to crash upstream is timed on another path (named).
    ref_fn, ref_note = safe_reference(
        reference if reference is not None else F.conv2d,
        problem,
        device.torch_device,
        weight_grad=phase in ("weight_grad", "backward"),
    )
    if phase != "forward" and mode == "graph":
        raise ValueError("mode='graph' times forward calls only; use cold or warm for gradient phases")
    facts: dict[str, Any] = {"seed": seed, "phase": phase, "machine": device.slug}
    if ref_note is not None:
        facts["reference_note"] = ref_note
    if phase != "forward" and mode == "auto":
        mode = "cold" if device.is_cuda else mode
        facts["mode_note"] = "gradient phases are timed without CUDA graphs"
    # Under the timing slot: the copy-bandwidth floor and peak memory are measurements too.
    with timing_slot(config), device_errors(device, nodeid, problem.id):
        extra = reference_facts(ctx, ref_fn, default_ref=reference is None)
        extra["memory"] = memory_facts(ctx, ref_fn)
    base_rule = rule or StopRule.for_timer(timer)
    check_inputs = ctx.inputs
    last: list[tuple[ConvInputs, object] | None] = [None]

    def run(the_rule: StopRule, extra: dict[str, Any], sticky: str | None) -> Comparison:
        with device_errors(device, nodeid, problem.id), perf_settings(problem, device) as settings:
            sets = InputSets(
                candidate, ref_fn, problem, phase, seed, device.torch_device, check_inputs, ctx.grad_out
            )
            cand = Workload(
                "candidate", sets.calls[0][0], sets.rotation(0), problem.min_bytes, sets.refresh(0)
            )
            ref = Workload(
                "reference", sets.calls[0][1], sets.rotation(1), problem.min_bytes, sets.refresh(1)
            )
            if phase != "forward":
                cand = Workload("candidate", cand.call)
                ref = Workload("reference", ref.call)
            try:
                comparison = slotted_pair(
                    config,
                    timer,
                    cand,
                    ref,
                    mode=mode,
                    rule=the_rule,
                    facts={**facts, **settings, **extra},
                    stored_mode=sticky,
                )
            finally:
                seen = sets.restore()  # the check's own values back (integrity, the confirm)
            last[0] = sets.last_output(seen)
        return sanity(comparison, problem, device)

    first, confirm = first_and_confirm(run, base_rule, extra, stored_mode)
    return TimedPair(first, confirm, last[0])  # last[0]: the first measurement's (no confirm yet)


def slotted_pair(
    config: pytest.Config,
    timer: Timer,
    candidate: Workload,
    reference: Workload,
    *,
    mode: str,
    rule: StopRule,
    facts: dict[str, Any],
    stored_mode: str | None,
) -> Comparison:
    """One paired measurement (``measure_pair``) under the timing slot: under pytest-xdist it runs
    alone on a device the workers share (:func:`~pytest_convperf.measure.parallel.timing_slot`)."""
    with timing_slot(config):
        return measure_pair(
            timer, candidate, reference, mode=mode, rule=rule, facts=facts, stored_mode=stored_mode
        )


Run = Callable[[StopRule, dict[str, Any], "str | None"], Comparison]


def first_and_confirm(
    run: Run, rule: StopRule, extra: dict[str, Any], stored_mode: str | None
) -> tuple[Comparison, Callable[[int], Comparison]]:
    """The first measurement, ``run(rule, extra, stored_mode)``, and ``confirm(n_rounds)``, which
    re-runs it with ``n_rounds`` more rounds (``StopRule.for_rounds``), the first's mode (``auto``
    never mixes) and the ``confirm_of_rounds`` fact: the run/confirm step of every paired check."""
    first = run(rule, extra, stored_mode)

    def confirm(n_rounds: int) -> Comparison:
        return run(
            rule.for_rounds(n_rounds, first.n_rounds),
            {**extra, "confirm_of_rounds": first.n_rounds},
            first.candidate.mode,
        )

    return first, confirm


def sanity(comparison: Comparison, problem: Conv2dProblem, device: DeviceInfo) -> Comparison:
    """The comparison with its roofline floor as a fact; :class:`ImplausibleTime` under half of it."""
    bandwidth = device.copy_bandwidth()
    floor = problem.min_bytes / bandwidth
    for side, m in (("candidate", comparison.candidate), ("reference", comparison.reference)):
        if m.median < 0.5 * floor:
            raise ImplausibleTime(
                f"{side} median {m.median * 1e6:.3f} us on {problem.id} is under half the roofline floor "
                f"{floor * 1e6:.3f} us ({problem.min_bytes} bytes at the measured copy bandwidth "
                f"{bandwidth / 1e9:.1f} GB/s): the kernel did not do its work (did it launch, on the "
                "current stream, and write its whole output?)"
            )
    roofline = roofline_facts(problem.min_bytes, device)  # copy-BW and spec-peak floors
    return comparison.with_facts(roofline)
