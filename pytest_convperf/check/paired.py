"""The run/confirm step of every paired check: a check's (:func:`~pytest_convperf.check.pairing.time_pair`)
and the public :func:`~pytest_convperf.check.pair_check.check_pair`.

:func:`slotted_pair` is one paired measurement under the timing slot; :func:`first_and_confirm`
the first measurement of a pair's sides and ``confirm(n_rounds)``, which re-runs it with that many
rounds, each measurement a :func:`slotted_pair` inside the sides' own context.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from pytest_convperf.core.results import Comparison
from pytest_convperf.measure.parallel import timing_slot
from pytest_convperf.measure.rounds import measure_pair
from pytest_convperf.measure.rule import StopRule, Workload

if TYPE_CHECKING:
    import pytest

    from pytest_convperf.measure.protocol import Timer


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


# One measurement's two workloads and its facts, entered around the measurement (a check's
# ``PhaseCalls.measurement``: built under the perf settings, the check's inputs restored after).
Sides = Callable[[], AbstractContextManager[tuple[Workload, Workload, dict[str, Any]]]]


def first_and_confirm(
    config: pytest.Config,
    timer: Timer,
    sides: Sides,
    rule: StopRule,
    extra: dict[str, Any],
    stored_mode: str | None,
    *,
    mode: str,
    checked: Callable[[Comparison], Comparison] = lambda comparison: comparison,
) -> tuple[Comparison, Callable[[int], Comparison]]:
    """The first measurement of ``sides`` (:func:`slotted_pair`, its facts and ``extra``), and
    ``confirm(n_rounds)``, which re-runs it with ``n_rounds`` more rounds (``StopRule.for_rounds``),
    the first's mode (``auto`` never mixes) and the ``confirm_of_rounds`` fact: the run/confirm
    step of every paired check. ``checked``: applied to each comparison (a check's roofline sanity)."""

    def run(the_rule: StopRule, more: dict[str, Any], sticky: str | None) -> Comparison:
        with sides() as (candidate, reference, facts):
            comparison = slotted_pair(
                config,
                timer,
                candidate,
                reference,
                mode=mode,
                rule=the_rule,
                facts={**facts, **more},
                stored_mode=sticky,
            )
        return checked(comparison)

    first = run(rule, extra, stored_mode)

    def confirm(n_rounds: int) -> Comparison:
        return run(
            rule.for_rounds(n_rounds, first.n_rounds),
            {**extra, "confirm_of_rounds": first.n_rounds},
            first.candidate.mode,
        )

    return first, confirm
