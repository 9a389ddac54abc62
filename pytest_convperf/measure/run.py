"""Running one measurement's rounds on its timer (docs/design.md §5): warm-up, mode, timed rounds.

:func:`run` does it all, in order, and hands :mod:`.rounds` the finished :class:`TimedRounds`
(each side's measurement) to pair. One round runs every job once, alternating the order
(:func:`run_round`); warm-up runs rounds until two windows agree (:func:`warm_up`); ``run`` turns
workloads into the timer's jobs of the chosen mode (``auto``: CUDA graphs for short calls,
:func:`auto_choice`, with inputs rotated over > 2 x L2, :func:`_graph_jobs`); :func:`run_rounds`
runs the adaptive timed rounds until the CI target or a cap; then the rounds kept for clocks
(:func:`kept_rounds`), whether the run is inconclusive, the clock facts and each side's median and
CI are taken from them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_convperf.core import stats
from pytest_convperf.core.clocks import ClockSample, clock_facts, reason_names
from pytest_convperf.core.results import Measurement
from pytest_convperf.measure.protocol import AUTO_CHOICES, MODES, Job, Timer, slot_clocks
from pytest_convperf.measure.rule import StopRule, TimedCallError, Workload

__all__ = [
    "MAX_REPLAY_S",
    "GraphFacts",
    "TimedRounds",
    "WarmupResult",
    "auto_choice",
    "kept_rounds",
    "run",
    "run_round",
    "run_rounds",
    "warm_up",
]

MAX_REPLAY_S = 5e-3


@dataclass(frozen=True)
class WarmupResult:
    """How warm-up went: rounds run, whether two windows agreed, last window medians, time."""

    rounds: int
    converged: bool
    medians: tuple[float, ...]
    seconds: float

    def to_dict(self) -> dict[str, int | bool | float | list[float]]:
        return {
            "rounds": self.rounds,
            "converged": self.converged,
            "medians_us": [m * 1e6 for m in self.medians],
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class GraphFacts:
    """How a measurement's CUDA graphs were built (:func:`_graph_jobs`): calls per replay, the input
    sets rotated, the bytes they cover and whether L2 was ``rotated`` (over 2 x L2) or ``warm``."""

    calls_per_replay: int
    input_sets: int
    rotated_bytes: int
    l2: str

    def to_dict(self) -> dict[str, int | str]:
        return {
            "calls_per_replay": self.calls_per_replay,
            "input_sets": self.input_sets,
            "rotated_bytes": self.rotated_bytes,
            "l2": self.l2,
        }


def _order(n_jobs: int, round_index: int) -> list[int]:
    order = list(range(n_jobs))
    return order if round_index % 2 == 0 else order[::-1]


def run_round(timer: Timer, jobs: Sequence[Job], round_index: int, stage: str) -> list[float]:
    """One round in alternating order; samples returned in job order. ``stage``: warm-up or timing."""
    order = _order(len(jobs), round_index)
    try:
        for k in order:  # untimed: fresh input values for this round (a cache on values misses)
            before = jobs[k].before
            if before is not None:
                before(round_index)
        times = timer.run_round([jobs[k] for k in order])
    except TimedCallError:
        raise
    except Exception as exc:
        names = " and ".join(jobs[k].name for k in order)
        raise TimedCallError(f"{names} raised during {stage} round {round_index}: {exc}") from exc
    out = [0.0] * len(jobs)
    for k, t in zip(order, times):
        if not (t > 0.0 and math.isfinite(t)):
            raise TimedCallError(
                f"{jobs[k].name}: the timer returned {t!r} s in {stage} round {round_index}; "
                "a sample must be a positive finite time"
            )
        out[k] = t
    # A watcher (the live progress line, pytest_convperf.reports.progress) sees it, never steers.
    timer.observe_round(stage, round_index, [job.name for job in jobs], out)
    return out


def warm_up(timer: Timer, jobs: Sequence[Job], rule: StopRule) -> WarmupResult:
    """At least ``warmup_min_calls`` rounds, then windows until two successive windows' medians
    agree within ``warmup_tolerance`` for every job, or ``warmup_cap_s`` has passed."""
    start = timer.now()
    index = 0
    for _ in range(rule.warmup_min_calls):
        run_round(timer, jobs, index, "warm-up")
        index += 1
    previous: list[float] | None = None
    medians: list[float] = []
    converged = False
    while True:
        window: list[list[float]] = [[] for _ in jobs]
        for _ in range(rule.warmup_window):
            for k, t in enumerate(run_round(timer, jobs, index, "warm-up")):
                window[k].append(t)
            index += 1
            if timer.now() - start >= rule.warmup_cap_s:
                break  # a call of seconds: no whole window of them inside the cap
        if len(window[0]) < rule.warmup_window:
            medians = [stats.median(w) for w in window]
            break
        medians = [stats.median(w) for w in window]
        if previous is not None and all(
            abs(m / p - 1.0) <= rule.warmup_tolerance for m, p in zip(medians, previous)
        ):
            converged = True
            break
        previous = medians
        if timer.now() - start >= rule.warmup_cap_s:
            break
    timer.warmed_up()
    return WarmupResult(index, converged, tuple(medians), timer.now() - start)


def auto_choice(warm_medians: Sequence[float], rule: StopRule, stored_mode: str | None) -> tuple[bool, str]:
    """Whether ``auto`` times with CUDA graphs, and why (for the facts).

    A stored entry's mode wins (sticky per key): near the ~20 us threshold a fresh choice could
    flip between runs, and cold and graph timings are never compared with each other.
    """
    if stored_mode in AUTO_CHOICES:
        why = "as stored (the baseline entry's mode, or the first measurement's for a confirm)"
        return stored_mode == "graph", f"{stored_mode}: {why}"
    fastest = min(warm_medians)
    graph = fastest < rule.graph_threshold_s
    sign = "<" if graph else ">="
    return graph, (
        f"{'graph' if graph else 'cold'}: warm-up median {fastest * 1e6:.3g} us {sign} "
        f"{rule.graph_threshold_s * 1e6:.3g} us"
    )


def _graph_jobs(
    timer: Timer, workloads: Sequence[Workload], per_call_s: Sequence[float], rule: StopRule
) -> tuple[list[Job], GraphFacts]:
    """Graph jobs of K calls (a replay near ``graph_replay_s``), inputs rotated over > 2 x L2.

    K comes from the faster side and is shared (both sides time the same number of calls); the
    slower side's replay is kept under 5 ms, past which sustained load starts to lower clocks.
    """
    low, high = rule.graph_calls
    k = max(low, min(high, round(rule.graph_replay_s / max(min(per_call_s), 1e-9))))
    need = 2 * timer.l2_bytes
    bytes_per_call = max((w.bytes_per_call for w in workloads), default=0)
    sets = 1
    if bytes_per_call > 0 and all(w.rotation is not None for w in workloads):
        sets = math.ceil(need / bytes_per_call) + 1
        k = max(k, min(high, sets))
    k = max(low, min(k, round(MAX_REPLAY_S / max(max(per_call_s), 1e-9))))
    sets = min(sets, k)
    covered = sets * bytes_per_call
    l2 = "rotated" if sets > 1 and covered > need else "warm"
    jobs = []
    for w in workloads:
        calls = w.rotation(sets) if sets > 1 and w.rotation is not None else [w.call]
        jobs.append(timer.graph_job(w.name, calls, k, l2))
    return jobs, GraphFacts(k, sets, covered, l2)


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
    # Per round: each job's SM clock read right before its slot (``protocol.slot_clocks``), or None.
    slot_mhz: list[Sequence[float | None] | None] = field(default_factory=list)
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
        rounds.slot_mhz.append(slot_clocks(timer))
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


def _inconclusive(rounds: _Rounds, rule: StopRule) -> str | None:
    """Why the rounds cannot be judged (too many dropped for clocks, or too few kept), else None."""
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


def _slot_mhz(rounds: _Rounds, used: Sequence[int], job: int) -> float | None:
    """The median SM clock read right before job ``job``'s slot over the rounds ``used``; None unknown."""
    mhz = [s[job] for i in used if (s := rounds.slot_mhz[i]) is not None and s[job]]
    return stats.median([float(m) for m in mhz if m is not None]) if mhz else None


@dataclass(frozen=True)
class TimedRounds:
    """What one measurement's rounds gave (:func:`run`): each job's :class:`Measurement` over the
    rounds ``used`` (the rounds kept for clocks, or all of them when under 6 were kept: its samples,
    median and CI, mode and L2 state, the rounds ``dropped`` for clocks, ``noisy`` when a cap
    stopped the rounds), the warm-up, how many rounds ran (``n``) and why they ``stop``ped, whether
    the CI target was met (``converged``), the CI ``target``, the ``seconds`` the rounds took, why
    the measurement is ``inconclusive`` (None: it is not) and the ``clocks`` facts; how the mode was
    chosen: ``auto_mode`` (why ``auto`` chose it, None for an explicit mode), ``graph`` (the CUDA
    graphs timed) or ``graph_fallback`` (why graphs were wanted and not timed)."""

    measurements: list[Measurement]
    warm: WarmupResult
    used: list[int]
    n: int
    dropped: int
    converged: bool
    stop: str
    target: float
    seconds: float
    inconclusive: str | None
    clocks: dict[str, Any] | str  # core.clocks.clock_facts's
    auto_mode: str | None = None
    graph: GraphFacts | None = None
    graph_fallback: str | None = None

    def mode_facts(self) -> dict[str, str | dict[str, int | str]]:
        """The facts of how the mode was chosen, as a comparison's facts carry them (``graph``: the
        graphs' facts, or why there were none)."""
        facts: dict[str, str | dict[str, int | str]] = {}
        if self.auto_mode is not None:
            facts["auto_mode"] = self.auto_mode
        if self.graph is not None:
            facts["graph"] = self.graph.to_dict()
        elif self.graph_fallback is not None:
            facts["graph"] = self.graph_fallback
        return facts


def run(
    timer: Timer,
    workloads: Sequence[Workload],
    mode: str,
    rule: StopRule,
    stored_mode: str | None = None,
) -> TimedRounds:
    """One measurement's rounds on ``timer`` (pinned), in order: the jobs of ``mode`` and their
    warm-up; for ``auto`` the mode chosen from it (:func:`auto_choice`); for graphs the graph jobs
    (:func:`_graph_jobs`) and their own warm-up (each step's facts returned, not written into the
    caller's); the adaptive
    timed rounds (:func:`run_rounds`); then what they say: the rounds kept and used, whether the run
    is inconclusive, the clock facts and each job's measurement."""
    if mode not in MODES:
        raise ValueError(f"timing mode {mode!r} is not one of {', '.join(MODES)}")
    base = "warm" if mode == "warm" else "cold"
    with timer.pinned():
        jobs = [replace(timer.job(w.name, w.call, base), before=w.refresh) for w in workloads]
        warm = warm_up(timer, jobs, rule)
        want_graph = mode == "graph"
        auto_mode: str | None = None
        graph: GraphFacts | None = None
        fallback: str | None = None
        if mode == "auto":
            want_graph, auto_mode = auto_choice(warm.medians, rule, stored_mode)
        if want_graph and not timer.supports_graphs:
            if mode == "graph":
                fallback = f"graph mode needs CUDA; the {timer.kind} timer timed {jobs[0].mode} instead"
        elif want_graph:
            try:
                graph_jobs, graph = _graph_jobs(timer, workloads, warm.medians, rule)
                warm = warm_up(timer, graph_jobs, rule)
                jobs = graph_jobs
            except TimedCallError:
                raise
            except Exception as exc:
                if mode == "graph":
                    raise TimedCallError(f"CUDA graph capture failed: {exc}") from exc
                graph = None  # the graphs' facts, had the capture gone through: not what was timed
                fallback = f"capture failed, timed {base} instead: {type(exc).__name__}: {exc}"
        rounds = run_rounds(timer, jobs, rule)
    used = rounds.kept if len(rounds.kept) >= 6 else list(range(rounds.n))
    dropped = rounds.n - len(rounds.kept)
    inconclusive = _inconclusive(rounds, rule)
    clocks = clock_facts(rounds.clocks, rounds.kept)
    samples = [[times[i] for i in used] for times in rounds.times]
    summaries = [stats.summarize(side) for side in samples]
    return TimedRounds(
        measurements=[
            Measurement(
                samples=tuple(side),
                median=summary.median,
                ci=summary.ci,
                n=len(side),
                dropped=dropped,
                mode=job.mode,
                l2=job.l2,
                noisy=not rounds.converged,
                sm_mhz=_slot_mhz(rounds, used, k),
            )
            for k, (side, summary, job) in enumerate(zip(samples, summaries, jobs))
        ],
        warm=warm,
        used=used,
        n=rounds.n,
        dropped=dropped,
        converged=rounds.converged,
        stop=rounds.stop,
        target=rounds.target,
        seconds=rounds.seconds,
        inconclusive=inconclusive,
        clocks=clocks,
        auto_mode=auto_mode,
        graph=graph,
        graph_fallback=fallback,
    )
