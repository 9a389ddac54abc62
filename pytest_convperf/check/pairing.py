"""The paired timing of one check: the facts taken once, the first measurement, its confirm.

:func:`time_pair` measures a candidate against its reference on the check's inputs (under the
timing slot and the perf settings of :mod:`pytest_convperf.check.calls`), and returns the first
:class:`~pytest_convperf.core.results.Comparison` with ``confirm(n_rounds)``, which re-times the same
pair with that many rounds (the confirm run is asked for in rounds from end to end; the run/confirm
step is every paired check's, :mod:`pytest_convperf.check.paired`). Every comparison passes the
roofline sanity check (:func:`pytest_convperf.core.roofline.sanity`): a time under half the floor is
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
from pytest_convperf.check.paired import first_and_confirm, slotted_pair
from pytest_convperf.core.results import Comparison
from pytest_convperf.core.roofline import ImplausibleTime, sanity
from pytest_convperf.correctness.known_defects import safe_reference
from pytest_convperf.measure.parallel import timing_slot
from pytest_convperf.measure.rounds import StopRule, Workload

if TYPE_CHECKING:
    from pytest_convperf.check.context import CheckContext
    from pytest_convperf.core.problem import ConvInputs

# ImplausibleTime is the public face's name for the roofline sanity check's failure (core.roofline).
__all__ = ["ImplausibleTime", "TimedPair", "time_pair"]


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
