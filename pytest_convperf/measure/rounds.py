"""One paired (or single) measurement (docs/design.md §5), shared by every timer: :func:`measure_pair`,
:func:`measure_one`.

Paired comparison: candidate and reference run back to back in each round, alternating which
goes first, and each round gives ln(t_candidate / t_reference). Pairing cancels the drift that
both share (clock ramps, a neighbour's load), which is why the ratio is far steadier than
either time. The first call of a round is slower, whichever side it is (on the 2-core CPU box
by 1.5-8 %, growing with the load), so the ratio and its CI come from AB/BA pairs of rounds,
each the mean of its two log ratios (``stats.crossover_units``): the order effect cancels in
every pair instead of only on average. Rounds stop when the 95 % CI of that median log ratio is
within the target (+-0.5 %, +-1 % under 10 us) after at least ``min_rounds``, or at a cap
(rounds, time, or a plateau of the CI width): then the result is flagged ``noisy``.

Clock control: after each round the timer reports the clock state; rounds whose SM clock is
under 0.9 x the run's median or that carry a hardware slowdown reason are dropped (and more
rounds are run to replace them). Over 25 % dropped makes the comparison inconclusive.

A measurement walks forward: the rule (:class:`StopRule`), then every round on the timer in one call
(:func:`pytest_convperf.measure.run.run`: warm-up, the mode and its graph jobs, the timed rounds, the
rounds kept for clocks, the clock facts), then the pair's statistic (each round's log ratio,
:func:`pytest_convperf.core.stats.paired_summary`), then the result, whose facts are the caller's
and the measurement's own (:class:`TimingFacts`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_convperf.core import stats
from pytest_convperf.core.results import Comparison, Measurement
from pytest_convperf.measure.protocol import Timer
from pytest_convperf.measure.rule import StopRule, Workload
from pytest_convperf.measure.run import TimedRounds, run

__all__ = ["TimingFacts", "measure_one", "measure_pair"]


@dataclass(frozen=True)
class TimingFacts:
    """What one paired measurement says about itself: its rounds (:class:`TimedRounds`: the warm-up,
    why the rounds stopped, the CI target, the seconds they took, the clocks, how the mode was
    chosen), the CI half-width reached and the timer's own facts (``Timer.facts``)."""

    rounds: TimedRounds
    ci_halfwidth: float
    timer: Mapping[str, Any]  # Timer.facts (measure.protocol)

    def to_facts(self, caller: Mapping[str, object]) -> dict[str, Any]:
        """The comparison's facts (``Comparison.facts``, core.results): the ``caller``'s, then these."""
        ran = self.rounds
        return {
            **caller,
            **ran.mode_facts(),
            **self.timer,
            "warmup": ran.warm.to_dict(),
            "stop": ran.stop,
            "target_halfwidth": ran.target,
            "ci_halfwidth": self.ci_halfwidth,
            "timing_seconds": ran.seconds,
            "clocks": ran.clocks,
        }


def measure_pair(
    timer: Timer,
    candidate: Workload | Callable[[], object],
    reference: Workload | Callable[[], object],
    *,
    mode: str = "auto",
    rule: StopRule | None = None,
    facts: Mapping[str, object] | None = None,
    stored_mode: str | None = None,
) -> Comparison:
    """Time candidate and reference in paired, alternating rounds; return the comparison.

    ``mode``: ``auto`` (cold, switching to CUDA graphs under ~20 us), ``cold``, ``warm`` or
    ``graph``. ``stored_mode`` (the baseline entry's mode, or a first measurement's for its
    confirm) makes ``auto`` reuse that choice (:func:`~pytest_convperf.measure.run.auto_choice`).
    ``rule`` sets rounds and caps (a confirm: ``rule.for_rounds(n, done)``); ``facts`` (the
    caller's) come first in the comparison's facts, then :class:`TimingFacts`.
    """
    sides = [Workload.of("candidate", candidate), Workload.of("reference", reference)]
    rule = rule or StopRule.for_timer(timer)
    ran = run(timer, sides, mode, rule, stored_mode)
    candidate_times, reference_times = ran.measurements
    log_ratios = stats.log_ratios(candidate_times.samples, reference_times.samples)
    ratio = stats.paired_summary(log_ratios, ran.used)
    measured = TimingFacts(ran, ratio.halfwidth, timer.facts())
    return Comparison(
        candidate=candidate_times,
        reference=reference_times,
        log_ratios=tuple(log_ratios),
        time_ratio=math.exp(ratio.median),
        time_ratio_ci=(math.exp(ratio.ci[0]), math.exp(ratio.ci[1])),
        se=ratio.se,
        n_rounds=len(ran.used),
        dropped_rounds=ran.dropped,
        noisy=not ran.converged,
        inconclusive=ran.inconclusive,
        facts=measured.to_facts(facts or {}),
    )


def measure_one(
    timer: Timer,
    fn: Workload | Callable[[], object],
    *,
    mode: str = "cold",
    rule: StopRule | None = None,
) -> Measurement:
    """Time one callable with warm-up and adaptive stopping on the CI of its median.

    ``noisy`` is set when a cap stopped it; rounds dropped for clocks are counted in ``dropped``.
    ``inconclusive`` says why when over ``rule.max_dropped`` of the rounds were dropped or fewer
    than 6 were kept (the samples are then all rounds, throttled ones included).
    """
    work = Workload.of("timed", fn)
    rule = rule or StopRule.for_timer(timer)
    ran = run(timer, [work], mode, rule)
    return dataclasses.replace(ran.measurements[0], inconclusive=ran.inconclusive)
