"""One check's row flattened for display (:class:`ReportRow`), grouped by verdict, most urgent first.

The data every report is written from (terminal lines, Markdown, JUnit properties, results.json,
live progress): which comparison a row's numbers come from and which measurement that is, the
quality and roofline shares, what the update did. Pure: no printing, no files.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_convperf.core.results import Comparison, Measurement, Verdict
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.judge.entry import UpdatePlan

# Most urgent first: what a reader must act on comes before what merely passed.
VERDICT_ORDER: tuple[str, ...] = (
    Verdict.CORRECTNESS_FAIL.value,
    Verdict.TIMEOUT.value,
    Verdict.FAIL.value,
    "SUSPECT",  # a per-check FAIL the night's false-alarm control did not keep (night.py)
    Verdict.INCONCLUSIVE.value,
    Verdict.STALE.value,
    Verdict.ADVISORY.value,
    Verdict.NEW.value,
    Verdict.IMPROVED.value,
    Verdict.PASS.value,
)
# The two measurements of a check, named alike in the live line, the verdict line and the summary:
# the screen (every check) and its confirm (docs/statistics.md). Not "first measurement": beside a
# verdict judged against an entry it read as the check's first ever measurement (issue 38.8).
FIRST = "screen"
CONFIRM = "confirm"


def as_number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ReportRow:
    """One check, flattened for display."""

    key: str
    module: str
    nodeid: str
    verdict: str
    message: str
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    baseline_speedup: float | None
    delta: float | None
    delta_ci: tuple[float, float] | None
    candidate_us: float | None
    reference_us: float | None
    mde: float | None
    n_rounds: int | None
    update: str | None
    quality: str | None = None
    # Candidate's % of roofline: the problem's minimum bytes at the measured copy bandwidth, and
    # at the GPU's datasheet peak (None: unknown GPU or CPU; ``spec`` names the peak or says why).
    roofline: float | None = None
    roofline_spec: float | None = None
    spec: str | None = None
    deterministic: bool = False  # declared with check(deterministic=True): two runs agreed bitwise
    measured: str = FIRST  # which measurement the numbers are (:func:`measured_by`)

    @classmethod
    def from_row(cls, row: CheckRow) -> ReportRow:
        decision = row.decision
        final = final_comparison(row)
        ratio = as_number(final.time_ratio) if final is not None else None
        ci = final.time_ratio_ci if final is not None else None
        base = as_number(row.baseline.time_ratio) if row.baseline is not None else None
        dci = decision.delta_ci if decision is not None else None
        facts = (final.facts if final is not None else None) or (
            row.comparison.facts if row.comparison is not None else {}
        )
        cand_us = _us(final.candidate if final is not None else None)
        return cls(
            key=row.key or row.nodeid or "?",
            module=row.module,
            nodeid=row.nodeid,
            verdict=str(row.verdict or "UNDECIDED"),  # None only without a decision
            message=row.message,
            speedup=1 / ratio if ratio else None,
            speedup_ci=(1 / ci[1], 1 / ci[0]) if ci and ci[0] and ci[1] else None,
            baseline_speedup=1 / base if base else None,
            delta=as_number(decision.delta) if decision is not None else None,
            delta_ci=(dci[0], dci[1]) if dci else None,
            candidate_us=cand_us,
            reference_us=_us(final.reference if final is not None else None),
            mde=as_number(decision.mde) if decision is not None else None,
            n_rounds=final.n_rounds if final is not None else None,
            update=_update_state(row.update),
            quality=_quality_cell(row),
            roofline=_share(facts.get("roofline_floor_us"), cand_us),
            roofline_spec=_share(facts.get("roofline_spec_floor_us"), cand_us),
            spec=str(facts["roofline_spec"]) if facts.get("roofline_spec") else None,
            deterministic=bool(row.facts.get("deterministic")),
            measured=measured_by(row),
        )


def final_comparison(row: CheckRow) -> Comparison | None:
    """The comparison a row's numbers come from: the confirm run when there was one, else the first."""
    confirm = row.decision.confirm if row.decision is not None else None
    return confirm if confirm is not None else row.comparison


def measured_by(row: CheckRow) -> str:
    """Which measurement :func:`final_comparison` is: the first, its confirm, or the confirm of
    fresh pytest processes (``fresh_confirm``: their rounds together)."""
    confirm = row.decision.confirm if row.decision is not None else None
    if confirm is None:
        return FIRST
    processes = as_number(confirm.facts.get("processes"))
    return f"{CONFIRM} in {processes:g} fresh processes" if processes and processes > 1 else CONFIRM


# A median this close to one end of its CI, relative to the other end (log scale), marks rounds
# that are skewed or fall in two groups: the order-statistic CI is then lopsided, and the median can
# jump between the groups from one measurement to the next (issue 24.4: 0.366x in [0.287, 0.378]).
# From LOPSIDED_ROUNDS rounds on: with fewer, chance alone makes it common (normal rounds: 8 % at
# 6 rounds, 3 % at 21, 0.6 % at 63; simulated, 2,000 draws each).
LOPSIDED = 0.25
LOPSIDED_ROUNDS = 30


def lopsided(r: ReportRow) -> bool:
    """Whether the speedup sits near an end of its own CI (both from the same median of log ratios)."""
    if r.speedup is None or r.speedup_ci is None or min(r.speedup_ci) <= 0:
        return False
    if (r.n_rounds or 0) < LOPSIDED_ROUNDS:
        return False
    near, far = sorted(abs(math.log(end / r.speedup)) for end in r.speedup_ci)
    return far > 0 and near < LOPSIDED * far


def _share(floor_us: Any, us: float | None) -> float | None:
    floor = as_number(floor_us)
    return floor / us if floor is not None and us else None


def row_quality(row: CheckRow) -> dict[str, float]:
    """The row's quality metrics against the float conv (``rel_l2``, ``sqnr_db``), if any."""
    metrics = row.extra_metrics or {}
    return {k: float(metrics[k]) for k in ("rel_l2", "sqnr_db") if as_number(metrics.get(k)) is not None}


def _quality_cell(row: CheckRow) -> str | None:
    q = row_quality(row)
    if not q:
        return None
    parts = []
    if "sqnr_db" in q:
        parts.append(f"SQNR {q['sqnr_db']:.3g} dB")
    if "rel_l2" in q:
        parts.append(f"rel L2 {q['rel_l2']:.3g}")
    return ", ".join(parts)


def _us(meas: Measurement | None) -> float | None:
    if meas is not None and as_number(meas.median) is not None:
        return float(meas.median) * 1e6
    return None


def grouped(rows: Iterable[CheckRow]) -> list[tuple[str, list[ReportRow]]]:
    """Rows grouped by verdict, most urgent group first, rows sorted by key."""
    groups: dict[str, list[ReportRow]] = {}
    for row in rows:
        r = ReportRow.from_row(row)
        groups.setdefault(r.verdict, []).append(r)
    order = {v: i for i, v in enumerate(VERDICT_ORDER)}
    return [
        (v, sorted(groups[v], key=lambda r: (r.module, r.key)))
        for v in sorted(groups, key=lambda v: order.get(v, len(order)))
    ]


def fake_timed(row: CheckRow) -> bool:
    """Whether the row's check was timed by the fake timer (replayed durations)."""
    return row.facts.get("timer") == "fake"


NOT_WRITTEN = "write planned, not written"


def _update_state(update: UpdatePlan | None) -> str | None:
    """A row's update as shown: its action; a planned write that was never applied (a crashed
    session's journal row, a failed file write) is :data:`NOT_WRITTEN`, never "write"."""
    action = update.action if update is not None else None
    if not action or action == "skip":
        return None
    if action == "write" and (update is None or update.written is not True):
        return NOT_WRITTEN
    return str(action)
