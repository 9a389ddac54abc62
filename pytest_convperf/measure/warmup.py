"""Warm-up and the timed jobs of a measurement (docs/design.md §5): what :mod:`.rounds` runs its rounds on.

One round runs every job once, alternating the order (:func:`run_round`); warm-up runs rounds
until two windows agree (:func:`warm_up`); :func:`prepare` turns workloads into the timer's
jobs of the chosen mode (``auto``: CUDA graphs for short calls, with inputs rotated over > 2 x L2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_convperf.core import stats
from pytest_convperf.measure.protocol import MODES, Job, Timer
from pytest_convperf.measure.rule import StopRule, TimedCallError, Workload, auto_choice

__all__ = ["MAX_REPLAY_S", "WarmupResult", "prepare", "run_round", "warm_up"]

MAX_REPLAY_S = 5e-3


@dataclass(frozen=True)
class WarmupResult:
    """How warm-up went: rounds run, whether two windows agreed, last window medians, time."""

    rounds: int
    converged: bool
    medians: tuple[float, ...]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "converged": self.converged,
            "medians_us": [m * 1e6 for m in self.medians],
            "seconds": self.seconds,
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


def prepare(
    timer: Timer,
    workloads: Sequence[Workload],
    mode: str,
    rule: StopRule,
    facts: dict[str, Any],
    stored_mode: str | None = None,
) -> tuple[list[Job], WarmupResult]:
    if mode not in MODES:
        raise ValueError(f"timing mode {mode!r} is not one of {', '.join(MODES)}")
    base = "warm" if mode == "warm" else "cold"
    jobs = [replace(timer.job(w.name, w.call, base), before=w.refresh) for w in workloads]
    warm = warm_up(timer, jobs, rule)
    want_graph = mode == "graph"
    if mode == "auto":
        want_graph, facts["auto_mode"] = auto_choice(warm.medians, rule, stored_mode)
    if want_graph and not timer.supports_graphs:
        if mode == "graph":
            facts["graph"] = f"graph mode needs CUDA; the {timer.kind} timer timed {jobs[0].mode} instead"
        return jobs, warm
    if want_graph:
        try:
            graph_jobs, graph_facts = _graph_jobs(timer, workloads, warm.medians, rule)
            facts["graph"] = graph_facts
            warm = warm_up(timer, graph_jobs, rule)
            jobs = graph_jobs
        except TimedCallError:
            raise
        except Exception as exc:
            if mode == "graph":
                raise TimedCallError(f"CUDA graph capture failed: {exc}") from exc
            facts["graph"] = f"capture failed, timed {base} instead: {type(exc).__name__}: {exc}"
    return jobs, warm


def _graph_jobs(
    timer: Timer, workloads: Sequence[Workload], per_call_s: Sequence[float], rule: StopRule
) -> tuple[list[Job], dict[str, Any]]:
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
    return jobs, {"calls_per_replay": k, "input_sets": sets, "rotated_bytes": covered, "l2": l2}
