"""Warm-up and adaptive rounds (docs/design.md §5), shared by every timer.

Paired comparison: candidate and reference run back to back in each round, alternating which
goes first, and each round gives ln(t_candidate / t_reference). Pairing cancels the drift that
both share (clock ramps, a neighbour's load), which is why the ratio is far steadier than
either time. The first call of a round is slower, whichever side it is (on the 2-core CPU box
by 1.5-8 %, growing with the load), so the ratio and its CI come from AB/BA pairs of rounds,
each the mean of its two log ratios (``stats.crossover_units``): the order effect cancels in
every pair instead of only on average. Rounds stop when the 95 % CI of that median log ratio is
within the target (+-0.5 %, +-1 % under 10 us) after at least ``min_rounds``, or at a cap
(rounds, time, or a plateau of the CI width): then the result is flagged ``noisy``.

Warm-up and the choice of graph jobs are :mod:`pytest_convperf.measure.warmup`.

Clock control: after each round the timer reports the clock state; rounds whose SM clock is
under 0.9 x the run's median or that carry a hardware slowdown reason are dropped (and more
rounds are run to replace them). Over 25 % dropped makes the comparison inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_convperf.core import stats
from pytest_convperf.core.device import ClockSample, reason_names
from pytest_convperf.core.results import Comparison, Measurement
from pytest_convperf.measure.protocol import Job, Timer
from pytest_convperf.measure.rule import StopRule, TimedCallError, Workload
from pytest_convperf.measure.warmup import WarmupResult, prepare, run_round, warm_up

__all__ = [
    "StopRule",
    "TimedCallError",
    "WarmupResult",
    "Workload",
    "kept_rounds",
    "measure_one",
    "measure_pair",
    "run_rounds",
    "warm_up",
]


def kept_rounds(clocks: Sequence[ClockSample | None], floor: float) -> list[int]:
    """Indices of rounds to keep: drop SM clock < ``floor`` x the run's median, or HW slowdown."""
    known = [c.sm_mhz for c in clocks if c is not None and c.sm_mhz]
    threshold = floor * stats.median(known) if known else 0.0
    kept = []
    for i, c in enumerate(clocks):
        if c is not None and (c.hw_slowdown or (c.sm_mhz is not None and c.sm_mhz < threshold)):
            continue
        kept.append(i)
    return kept


@dataclass
class _Rounds:
    times: list[list[float]]
    clocks: list[ClockSample | None] = field(default_factory=list)
    stop: str = ""
    converged: bool = False
    target: float = 0.0
    kept: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def n(self) -> int:
        return len(self.clocks)


def _summary(rounds: _Rounds, kept: Sequence[int]) -> stats.MedianSummary:
    """Paired: the time ratio over AB/BA crossover units of the kept rounds (job 0 over job 1;
    :func:`~pytest_convperf.core.stats.paired_summary`); single: the log times."""
    if len(rounds.times) == 2:
        lr = stats.log_ratios([rounds.times[0][i] for i in kept], [rounds.times[1][i] for i in kept])
        return stats.paired_summary(lr, kept)
    return stats.summarize([math.log(rounds.times[0][i]) for i in kept])


def _due(n: int) -> bool:
    # The CI is a sort of all kept rounds: check every round early, then every ~2 % of rounds.
    return n <= 100 or n % max(1, n // 50) == 0


def run_rounds(timer: Timer, jobs: Sequence[Job], rule: StopRule) -> _Rounds:
    """Adaptive rounds until the CI target is met after ``min_rounds``, or a cap."""
    start = timer.now()
    rounds = _Rounds(times=[[] for _ in jobs])
    history: list[tuple[int, float]] = []
    # Safety valve: min_rounds is honoured past max_time_s, but not past 4x it (a 1 s kernel).
    hard_cap_s = 4.0 * rule.max_time_s
    while True:
        index = rounds.n
        for k, t in enumerate(run_round(timer, jobs, index, "timing")):
            rounds.times[k].append(t)
        rounds.clocks.append(timer.clocks())
        n = rounds.n
        elapsed = timer.now() - start
        if n < rule.min_rounds:
            if elapsed >= hard_cap_s:
                rounds.stop = f"time cap: {n} rounds in {elapsed:.2f} s (under the {rule.min_rounds} wanted)"
                break
            continue
        if not _due(n) and n < rule.max_rounds and elapsed < rule.max_time_s:
            continue
        kept = kept_rounds(rounds.clocks, rule.clock_floor)
        if len(kept) >= max(6, rule.min_rounds // 2):
            fastest = min(stats.median([rounds.times[k][i] for i in kept]) for k in range(len(jobs)))
            rounds.target = rule.target or (0.01 if fastest < rule.short_kernel_s else 0.005)
            halfwidth = _summary(rounds, kept).halfwidth
            if len(kept) >= rule.min_rounds and halfwidth <= rounds.target:
                rounds.converged = True
                rounds.stop = f"CI half-width {halfwidth:.4f} <= {rounds.target} after {n} rounds"
                break
            history.append((n, halfwidth))
            old = [hw for m, hw in history if m <= n - rule.plateau_rounds]
            if old and halfwidth > 0.9 * old[-1]:
                rounds.stop = (
                    f"plateau: CI half-width {halfwidth:.4f} did not shrink 10 % "
                    f"in {rule.plateau_rounds} rounds"
                )
                break
        if n >= rule.max_rounds:
            rounds.stop = f"round cap {rule.max_rounds}"
            break
        if elapsed >= rule.max_time_s:
            rounds.stop = f"time cap {rule.max_time_s} s after {n} rounds"
            break
        if n >= 4 * rule.min_rounds and n - len(kept) > 0.5 * n:
            rounds.stop = f"{n - len(kept)} of {n} rounds dropped for clocks; stopped early"
            break
    rounds.kept = kept_rounds(rounds.clocks, rule.clock_floor)
    rounds.seconds = timer.now() - start
    return rounds


def _clock_facts(clocks: Sequence[ClockSample | None], kept: Sequence[int]) -> dict[str, Any] | str:
    seen = [c for c in clocks if c is not None and c.sm_mhz]
    if not seen:
        return "clocks unknown"
    mhz = [c.sm_mhz for c in seen if c.sm_mhz is not None]
    reasons = 0
    for c in seen:
        reasons |= c.reasons or 0
    unknown = sum(1 for c in seen if c.reasons is None)
    temps = [c.temp_c for c in seen if c.temp_c is not None]
    power = [c.power_w for c in seen if c.power_w is not None]
    kept_mhz = [clocks[i].sm_mhz for i in kept if clocks[i] is not None and clocks[i].sm_mhz]  # type: ignore[union-attr]
    return {
        "sm_mhz_median": stats.median(mhz),
        "sm_mhz_min": min(mhz),
        "sm_mhz_max": max(mhz),
        "sm_mhz_kept_median": stats.median(kept_mhz) if kept_mhz else None,  # type: ignore[arg-type]
        "reasons_seen": reason_names(reasons),
        "reasons_unknown_rounds": unknown,  # NVML could not report throttle reasons for these rounds
        "temp_c_max": max(temps) if temps else None,
        "power_w_median": stats.median(power) if power else None,
    }


def _measurement(samples: Sequence[float], job: Job, dropped: int, noisy: bool) -> Measurement:
    summary = stats.summarize(samples)
    return Measurement(
        samples=tuple(samples),
        median=summary.median,
        ci=summary.ci,
        n=len(samples),
        dropped=dropped,
        mode=job.mode,
        l2=job.l2,
        noisy=noisy,
    )


def _inconclusive(rounds: _Rounds, rule: StopRule) -> str | None:
    dropped = rounds.n - len(rounds.kept)
    if rounds.n and dropped > rule.max_dropped * rounds.n:
        reasons: set[str] = set()
        for c in rounds.clocks:
            if c is not None:
                reasons.update(reason_names(c.reasons) if c.reasons is not None else ["unknown"])
        return (
            f"{dropped} of {rounds.n} timing rounds dropped (over {rule.max_dropped:.0%}): SM clock under "
            f"{rule.clock_floor} x the run's median or a hardware slowdown"
            f" (reasons seen: {', '.join(sorted(reasons)) or 'none'}); the clocks were too unstable to judge"
        )
    if len(rounds.kept) < 6:
        return (
            f"only {len(rounds.kept)} timing rounds kept; at least 6 are needed for a 95 % CI of the median"
        )
    return None


def _as_workload(name: str, item: Workload | Callable[[], object]) -> Workload:
    return item if isinstance(item, Workload) else Workload(name, item)


def measure_pair(
    timer: Timer,
    candidate: Workload | Callable[[], object],
    reference: Workload | Callable[[], object],
    *,
    mode: str = "auto",
    rule: StopRule | None = None,
    facts: dict[str, Any] | None = None,
    stored_mode: str | None = None,
) -> Comparison:
    """Time candidate and reference in paired, alternating rounds; return the comparison.

    ``mode``: ``auto`` (cold, switching to CUDA graphs under ~20 us), ``cold``, ``warm`` or
    ``graph``. ``stored_mode`` (the baseline entry's mode, or a first measurement's for its
    confirm) makes ``auto`` reuse that choice (:func:`~pytest_convperf.measure.rule.auto_choice`).
    ``rule`` sets rounds and caps (a confirm: ``rule.for_rounds(n, done)``); ``facts`` are merged.
    """
    rule = rule or StopRule.for_timer(timer)
    cand = _as_workload("candidate", candidate)
    ref = _as_workload("reference", reference)
    out_facts: dict[str, Any] = dict(facts or {})
    with timer.pinned():
        jobs, warm = prepare(timer, [cand, ref], mode, rule, out_facts, stored_mode)
        rounds = run_rounds(timer, jobs, rule)
    kept = rounds.kept
    inconclusive = _inconclusive(rounds, rule)
    use = kept if len(kept) >= 6 else list(range(rounds.n))
    dropped = rounds.n - len(kept)
    noisy = not rounds.converged
    c_samples = [rounds.times[0][i] for i in use]
    r_samples = [rounds.times[1][i] for i in use]
    lr = stats.log_ratios(c_samples, r_samples)
    summary = stats.paired_summary(lr, use)
    out_facts.update(timer.facts())
    out_facts.update(
        warmup=warm.to_dict(),
        stop=rounds.stop,
        target_halfwidth=rounds.target,
        ci_halfwidth=summary.halfwidth,
        timing_seconds=rounds.seconds,
        clocks=_clock_facts(rounds.clocks, kept),
    )
    return Comparison(
        candidate=_measurement(c_samples, jobs[0], dropped, noisy),
        reference=_measurement(r_samples, jobs[1], dropped, noisy),
        log_ratios=tuple(lr),
        time_ratio=math.exp(summary.median),
        time_ratio_ci=(math.exp(summary.ci[0]), math.exp(summary.ci[1])),
        se=summary.se,
        n_rounds=len(use),
        dropped_rounds=dropped,
        noisy=noisy,
        inconclusive=inconclusive,
        facts=out_facts,
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
    rule = rule or StopRule.for_timer(timer)
    work = _as_workload("timed", fn)
    facts: dict[str, Any] = {}
    with timer.pinned():
        jobs, _ = prepare(timer, [work], mode, rule, facts)
        rounds = run_rounds(timer, jobs, rule)
    use = rounds.kept if len(rounds.kept) >= 6 else list(range(rounds.n))
    samples = [rounds.times[0][i] for i in use]
    measurement = _measurement(samples, jobs[0], rounds.n - len(rounds.kept), not rounds.converged)
    return replace(measurement, inconclusive=_inconclusive(rounds, rule))
