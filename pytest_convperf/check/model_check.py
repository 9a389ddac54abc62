"""A check without a conv problem: two arbitrary callables (whole models, fused blocks), ``check_pair``.

``convperf.check`` takes a conv candidate and a ``Conv2dProblem``. A model-level comparison (the
stock network against the same network running our kernels) has no problem spec, so
:func:`check_pair` times the two callables in paired rounds and hands the comparison to
``convperf.judge``, the same last step as a check: the baseline decision, which fails a confirmed
regression of the time ratio and passes NEW/PASS/IMPROVED/ADVISORY with a note, and one result row.
It is timed as a conv check is (:class:`~pytest_convperf.check.paired_timing.PairedTiming`: the
first measurement and its confirm, each under the timing slot).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from pytest_convperf.check.paired_timing import PairedTiming
from pytest_convperf.core.precision import ieee_fp32
from pytest_convperf.measure.rule import StopRule, Workload

if TYPE_CHECKING:
    from pytest_convperf.check.fixture import ConvperfFixture
    from pytest_convperf.core.results import Comparison, ErrorStats


def check_pair(
    convperf: ConvperfFixture,
    *,
    name: str,
    phase: str,
    candidate: Callable[[], object],
    reference: Callable[[], object],
    errors: Sequence[ErrorStats] = (),
    facts: Mapping[str, Any] | None = None,
    rule: Mapping[str, Any] | None = None,
    mode: str = "cold",
    ieee: bool = True,
) -> Comparison:
    """Time ``candidate`` against ``reference`` in paired rounds, record a row, decide on the test.

    ``name`` names the workload (e.g. ``mobilenet_v2-n8-224``; the row's ``problem``), ``phase``
    the part timed (``forward``/``backward``/...). ``errors`` are the candidate's correctness stats
    (checked by the caller; their drift is gated too). ``rule`` overrides the stop rule
    (``StopRule`` fields, e.g. ``{"min_rounds": 7, "max_time_s": 1.0}``). ``ieee`` pins fp32 convs
    and matmuls to IEEE (TF32 off) on both sides while timing, like ``convperf.check`` does for
    fp32. The baseline key is the test's name (plus ``:<phase>`` unless the name holds the phase).
    Returns the first measurement's comparison.
    """
    timer = convperf.timer
    the_rule = StopRule.for_timer(timer, **dict(rule or {}))
    base_facts: dict[str, object] = {
        "phase": phase,
        "tf32": "off" if ieee else "pytorch default",
        **dict(facts or {}),
    }

    config = convperf.request.config

    @contextmanager
    def sides() -> Iterator[tuple[Workload, Workload, dict[str, object]]]:
        # Under the timing slot (PairedTiming.measure), like every check: alone on a shared device.
        with ieee_fp32() if ieee else nullcontext():
            yield Workload("candidate", candidate), Workload("reference", reference), base_facts

    timing = PairedTiming(config, timer, sides, the_rule, mode, {})
    first = timing.measure()
    test = str(convperf.request.node.name)
    return convperf.judge(
        first,
        name=name,
        phase=phase,
        errors=errors,
        confirm=timing.confirm_of(first),
        key=test if phase in test else f"{test}:{phase}",
        # The machine is the row's own fact, as a conv check's is (``pipeline.CheckFacts``): the
        # comparison does not carry it.
        facts={
            "machine": convperf.device.slug,
            **{k: v for k, v in base_facts.items() if isinstance(v, (str, int, float, bool, type(None)))},
        },
    )


__all__ = ["check_pair"]
