"""The run/confirm step of every paired check: a check's (:func:`~pytest_convperf.check.pairing.time_pair`)
and the public :func:`~pytest_convperf.check.pair_check.check_pair`.

:func:`slotted_pair` is one paired measurement under the timing slot; :func:`first_and_confirm`
the first measurement and ``confirm(n_rounds)``, which re-runs it with that many rounds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_convperf.core.results import Comparison
from pytest_convperf.measure.parallel import timing_slot
from pytest_convperf.measure.rounds import StopRule, Workload, measure_pair

if TYPE_CHECKING:
    import pytest

    from pytest_convperf.measure.timers import Timer


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
