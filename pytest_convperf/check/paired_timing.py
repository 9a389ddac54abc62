"""The paired timing of a candidate and its reference: the first measurement and its confirm.

One concept, used by every paired check: a conv check (``ConvperfFixture.check``, ``.measure`` and
the A/B of ``--convperf-against``, through :meth:`PairedTiming.for_check`) and the check of two
arbitrary callables (:func:`~pytest_convperf.check.model_check.check_pair`). A
:class:`PairedTiming` says how its pair is timed (the timer, the sides entered around each
measurement, the stop rule, the mode, the facts); :meth:`PairedTiming.measure` is one paired
measurement (:func:`~pytest_convperf.measure.rounds.measure_pair`) inside the sides' context and
under the timing slot (under pytest-xdist it runs alone on a device the workers share,
:func:`~pytest_convperf.measure.parallel.timing_slot`), with the machine's witness around it on a
CPU (:mod:`~pytest_convperf.measure.witness`: the reference alone, before and after); given the
first measurement it is that measurement's confirm: ``n_rounds`` more rounds
(``StopRule.for_rounds``), the first's mode (``auto`` never mixes) and the ``confirm_of_rounds``
fact. A check's comparisons pass the roofline sanity
check (:func:`pytest_convperf.core.roofline.sanity`): a time under half the floor is
:class:`ImplausibleTime`, and the floors are added as facts (``Comparison.with_facts``).

The walk of one check's candidate to its timed rounds is ``ConvperfFixture.check`` -> ``run_check``
-> :meth:`PairedTiming.measure` -> ``measure_pair`` -> ``measure.run.run`` (tests/ci/test_walk.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from pytest_convperf.core.results import Comparison
from pytest_convperf.core.roofline import sanity
from pytest_convperf.measure import witness
from pytest_convperf.measure.parallel import timing_slot
from pytest_convperf.measure.rounds import measure_pair
from pytest_convperf.measure.rule import StopRule, Workload

if TYPE_CHECKING:
    import pytest

    from pytest_convperf.check.calls import PhaseCalls
    from pytest_convperf.check.context import CheckContext
    from pytest_convperf.measure.protocol import Timer

# ImplausibleTime is the public face's name for the roofline sanity check's failure (core.roofline).
__all__ = ["PairedTiming", "Sides"]

# One measurement's two workloads and their facts, entered around the measurement (a check's
# ``PhaseCalls.measurement``: built under the perf settings, the check's inputs restored after).
Sides = Callable[[], AbstractContextManager[tuple[Workload, Workload, Mapping[str, object]]]]


def _unchecked(comparison: Comparison) -> Comparison:
    return comparison


@dataclass(frozen=True)
class PairedTiming:
    """How one pair is timed: ``sides`` entered around each measurement, on ``timer`` in ``mode``
    under ``rule``, with ``facts`` (added to the sides' own), ``stored_mode`` (the entry's mode,
    which ``auto`` reuses for the first measurement) and ``checked`` applied to each comparison (a
    check's roofline sanity)."""

    config: pytest.Config
    timer: Timer
    sides: Sides
    rule: StopRule
    mode: str
    facts: Mapping[str, object]
    stored_mode: str | None = None
    checked: Callable[[Comparison], Comparison] = _unchecked

    @classmethod
    def for_check(
        cls,
        ctx: CheckContext,
        calls: PhaseCalls,
        *,
        rule: StopRule | None = None,
        stored_mode: str | None = None,
    ) -> PairedTiming:
        """The paired timing of a conv check: ``ctx.candidate`` against ``calls.reference`` on the
        check's phase calls (``calls``, built once by :func:`~pytest_convperf.check.calls.phase_calls`:
        set 0 is ``ctx.inputs``) in ``ctx.mode`` (a gradient phase's ``auto`` is ``cold`` on CUDA:
        no graphs), each comparison checked against the roofline."""
        problem, device, mode = ctx.problem, ctx.device, ctx.mode
        # The seed and the machine are the row's own facts (``pipeline.CheckFacts``), written there once.
        facts: dict[str, object] = {"phase": ctx.phase}
        if ctx.phase != "forward" and mode == "auto":
            mode = "cold" if device.is_cuda else mode
            facts["mode_note"] = "gradient phases are timed without CUDA graphs"
        return cls(
            ctx.config,
            ctx.timer,
            calls.measurement,
            rule or StopRule.for_timer(ctx.timer),
            mode,
            {**facts, **calls.facts.to_facts()},
            stored_mode,
            lambda comparison: sanity(comparison, problem, device),
        )

    def measure(self, first: Comparison | None = None, n_rounds: int = 0) -> Comparison:
        """The first measurement (``first`` None), or the confirm of ``first``: ``n_rounds`` more
        paired rounds in ``first``'s mode, with the ``confirm_of_rounds`` fact."""
        rule, facts, stored_mode = self.rule, self.facts, self.stored_mode
        if first is not None:
            rule = rule.for_rounds(n_rounds, first.n_rounds)
            facts = {**facts, "confirm_of_rounds": first.n_rounds}
            stored_mode = first.candidate.mode
        with self.sides() as (candidate, reference, side_facts), timing_slot(self.config):
            witnessed = witness.applies(self.timer)
            before = witness.look(self.timer, reference, rule) if witnessed else 0.0
            comparison = measure_pair(
                self.timer,
                candidate,
                reference,
                mode=self.mode,
                rule=rule,
                facts={**side_facts, **facts},
                stored_mode=stored_mode,
            )
            after = witness.look(self.timer, reference, rule) if witnessed else 0.0
        if before > 0 and after > 0:
            comparison = comparison.with_facts(witness.Witness(before, after).to_facts())
        return self.checked(comparison)

    def confirm_of(self, first: Comparison) -> Callable[[int], Comparison]:
        """``confirm(n_rounds)`` of ``first``: what the judgement calls to measure again."""
        return partial(self.measure, first)
