"""The paired timing of one check: the first measurement, its confirm.

:func:`time_pair` measures a candidate against its reference over the check's phase calls
(:class:`~pytest_convperf.check.calls.PhaseCalls`, built once with the facts taken before timing;
each measurement under the timing slot and the perf settings), and returns the first
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

from pytest_convperf.check.paired import first_and_confirm
from pytest_convperf.core.results import Comparison
from pytest_convperf.core.roofline import sanity
from pytest_convperf.measure.rule import StopRule

if TYPE_CHECKING:
    from pytest_convperf.check.calls import PhaseCalls
    from pytest_convperf.check.context import CheckContext
    from pytest_convperf.core.problem import ConvInputs

# ImplausibleTime is the public face's name for the roofline sanity check's failure (core.roofline).
__all__ = ["TimedPair", "time_pair"]


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
    calls: PhaseCalls,
    *,
    rule: StopRule | None = None,
    stored_mode: str | None = None,
) -> TimedPair:
    """Measure ``ctx.candidate`` against ``calls.reference`` once; ``confirm(n_rounds)`` re-times
    with ``n_rounds`` rounds, on the check's phase calls (``calls``, built once by
    :func:`~pytest_convperf.check.calls.phase_calls`: set 0 is ``ctx.inputs``) in ``ctx.mode``.

    ``stored_mode``: the entry's timing mode, which ``auto`` reuses (the confirm reuses the first
    run's: never mixed)."""
    problem, phase, device, mode = ctx.problem, ctx.phase, ctx.device, ctx.mode
    timer, config = ctx.timer, ctx.config
    facts: dict[str, Any] = {"seed": ctx.seed, "phase": phase, "machine": device.slug}
    if phase != "forward" and mode == "auto":
        mode = "cold" if device.is_cuda else mode
        facts["mode_note"] = "gradient phases are timed without CUDA graphs"

    first, confirm = first_and_confirm(
        config,
        timer,
        calls.measurement,
        rule or StopRule.for_timer(timer),
        {**facts, **calls.facts},
        stored_mode,
        mode=mode,
        checked=lambda comparison: sanity(comparison, problem, device),
    )
    return TimedPair(first, confirm, calls.last[0])  # the first measurement's (no confirm yet)
