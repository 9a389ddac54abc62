"""Reports as data first, printing last: terminal lines, Markdown, pytest-benchmark JSON, history, plot.

Input is the list of result rows the controller collected (``results.CheckRow``);
every function here is pure except the ``write_*`` ones, which write one file each.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_convperf.core.entry import UpdatePlan
from pytest_convperf.core.results import CheckRow, Comparison, Measurement, Verdict

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
SCHEMA = "convperf-results/1"
# The two measurements of a check, named alike in the live line, the verdict line and the summary.
FIRST = "first measurement"
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
            verdict=str(row.verdict or (decision.verdict if decision is not None else None) or "UNDECIDED"),
            message=str(row.message or (decision.message if decision is not None else "")),
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


def speedup_text(r: ReportRow) -> str:
    """``speedup 0.366x [0.287, 0.378]``, saying so when the median sits near an end of its CI."""
    text = f"speedup {_x(r.speedup)} {_ci(r.speedup_ci)}".strip()
    return text + " (median near its CI's end: rounds skewed or in two groups)" if lopsided(r) else text


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


def _x(value: float | None) -> str:
    return f"{value:.3f}x" if value is not None else "-"


def _ci(ci: tuple[float, float] | None, pct: bool = False) -> str:
    if ci is None:
        return ""
    if pct:
        return f"[{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]"
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _pct(value: float | None) -> str:
    return f"{value * 100:+.1f} %" if value is not None else "-"


def _usf(value: float | None) -> str:
    return fixed(value) if value is not None else "-"


def fixed(value: float) -> str:
    """Four significant digits without exponent forms: ``11170``, ``355.1``, ``0.04123``."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, 3 - math.floor(math.log10(abs(value))))
    return f"{round(value, decimals):.{decimals}f}"


def fmt_time(us: float | None) -> str:
    """A time given in microseconds, in a readable unit: ``355.1 us``, ``11.17 ms``, ``2.300 s``."""
    if us is None:
        return "-"
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if abs(us) >= scale:
            return f"{fixed(us / scale)} {unit}"
    return f"{fixed(us)} us"


def cells(r: ReportRow) -> dict[str, str]:
    """The display columns of one row."""
    return {
        "check": (f"{r.module}::{r.key}" if r.module else r.key)
        + (" (deterministic)" if r.deterministic else ""),
        "speedup": f"{_x(r.speedup)} {_ci(r.speedup_ci)}".strip(),
        "baseline": _x(r.baseline_speedup),
        "delta": f"{_pct(r.delta)} {_ci(r.delta_ci, pct=True)}".strip(),
        "candidate us": _usf(r.candidate_us),
        "reference us": _usf(r.reference_us),
        "MDE": f"{r.mde:.1%}" if r.mde is not None else "-",
        "update": r.update or "",
        "roofline (copy BW)": f"{r.roofline:.0%}" if r.roofline is not None else "-",
        "roofline (spec)": f"{r.roofline_spec:.0%}" if r.roofline_spec is not None else "-",
    }


def roofline_note(rows: Sequence[ReportRow]) -> str | None:
    """What the two roofline columns mean, naming the spec peaks used (or why there is none)."""
    specs = sorted({r.spec for r in rows if r.spec})
    if not any(r.roofline is not None for r in rows):
        return None
    return (
        "roofline: the candidate's median against the time to move the problem's minimum bytes at the "
        "measured device copy bandwidth (copy BW) and at the datasheet peak (spec: "
        + ("; ".join(specs) if specs else "none")
        + ")"
    )


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


def _recorded(rows: Sequence[ReportRow], state: str = "write") -> int:
    return sum(1 for r in rows if r.update == state)


def counts(rows: Sequence[CheckRow]) -> str:
    """``NEW 16 (16 recorded), FAIL 3 (3 recorded)``: the verdicts and, on an update run, what was stored."""
    parts = []
    for verdict, group in grouped(rows):
        n = _recorded(group)
        parts.append(f"{verdict} {len(group)}" + (f" ({n} recorded)" if n else ""))
    return ", ".join(parts)


def _heading(verdict: str, group: Sequence[ReportRow]) -> str:
    """A verdict block's heading; on an update run it says what was recorded, so that a FAIL
    whose new baseline was accepted (the test passes) tells one story with pytest's counts."""
    n, lost = _recorded(group), _recorded(group, NOT_WRITTEN)
    parts = [f"{lost} planned as the new baseline but NOT written"] if lost else []
    if n:
        passes = "; these tests pass" if verdict not in (Verdict.NEW.value, Verdict.IMPROVED.value) else ""
        parts.insert(0, f"{n} recorded as the new baseline by --convperf-update-baselines{passes}")
    return f"{verdict} ({len(group)})" + (f": {'; '.join(parts)}" if parts else "")


def _note(r: ReportRow) -> str:
    """The first line of a check's message; a recorded check says so instead of asking to record it."""
    if r.update == "write":
        return "recorded as the new baseline"
    if r.update == NOT_WRITTEN:
        return "planned as the new baseline but NOT written (the session did not finish its update)"
    return r.message.splitlines()[0] if r.message else ""


def _check_line(r: ReportRow) -> str:
    c = cells(r)
    line = (
        f"  {c['check']}  {speedup_text(r)}  baseline {c['baseline']}  delta {c['delta']}  "
        f"cand {fmt_time(r.candidate_us)}  ref {fmt_time(r.reference_us)}"
    )
    if r.roofline is not None:
        spec = "spec unknown"
        if r.roofline_spec is not None:
            spec = f"{c['roofline (spec)']} of spec peak"
        line += f"  roofline {c['roofline (copy BW)']} of copy BW, {spec}"
    if r.quality:
        line += f"  quality {r.quality}"
    if r.update:
        line += f"  [update: {r.update}]"
    if r.n_rounds:
        line += f"  ({r.measured}, {r.n_rounds} rounds)"
    return line


def _module_line(module: str, group: Sequence[ReportRow]) -> str:
    """One line for a module's NEW checks: how many, their speedup range, recorded or not."""
    speeds = [r.speedup for r in group if r.speedup is not None]
    span = ""
    if speeds:
        lo, hi = _x(min(speeds)), _x(max(speeds))
        span = f", speedup {lo}" if lo == hi else f", speedup {lo} to {hi}"
    n = _recorded(group)
    if n == len(group):
        state = "recorded"
    elif n:
        state = f"{n} recorded"
    else:
        state = "not recorded: --convperf-update-baselines=new records them"
    checks = "check" if len(group) == 1 else "checks"
    return f"  {module or '(no module)'}: {len(group)} new {checks}{span} ({state})"


def terminal_lines(rows: Sequence[CheckRow], *, verbose: int = 0) -> list[str]:
    """The terminal summary: one block per verdict, a line per check with a note under non-PASS
    rows; NEW checks (a first run's many) as one line per module unless ``verbose`` > 0."""
    out: list[str] = []
    if any(fake_timed(r) for r in rows):
        out.append("timer: fake timer (replayed durations, not measurements)")
    groups = grouped(rows)
    # The note explains the roofline column of check lines: only when a check line shows one (NEW
    # checks folded into module lines show none, and a note about nothing dangles).
    shown = [r for v, g in groups for r in g if v != Verdict.NEW.value or verbose > 0]
    note = roofline_note(shown)
    if note:
        out.append(note)
    for verdict, group in groups:
        out.append(_heading(verdict, group))
        if verdict == Verdict.NEW.value and verbose <= 0:
            modules: dict[str, list[ReportRow]] = {}
            for r in group:
                modules.setdefault(r.module, []).append(r)
            out.extend(_module_line(m, g) for m, g in modules.items())
            continue
        for r in group:
            out.append(_check_line(r))
            note = _note(r)
            if verdict != Verdict.PASS.value and note:
                out.append(f"      {note}")
            if verdict == Verdict.FAIL.value and note and not r.update:
                # A FAIL's whole message (which kernels moved, the fresh processes' confirm): under
                # session-wide control no test failure report carries it (night.py).
                out.extend(f"      {line}" for line in r.message.splitlines()[1:])
    return out


def markdown(
    rows: Sequence[CheckRow],
    *,
    title: str = "convperf report",
    machine_info: Mapping[str, Any] | None = None,
) -> str:
    """Markdown for people (and ``$GITHUB_STEP_SUMMARY``): counts, then a table per verdict."""
    groups = grouped(rows)
    lines = [f"## {title}", ""]
    if machine_info:
        facts = ", ".join(
            f"{k} {v}"
            for k, v in machine_info.items()
            if k in ("machine", "device", "gpu", "cpu", "torch", "cuda", "cudnn", "driver")
        )
        lines += [f"Machine: {facts}", ""]
    if any(fake_timed(r) for r in rows):
        lines += ["Timer: **fake timer** (replayed durations, not measurements)", ""]
    lines += ["Verdicts: " + ", ".join(f"**{v}** {len(g)}" for v, g in groups), ""]
    note = roofline_note([r for _, g in groups for r in g])
    if note:
        lines += [note[0].upper() + note[1:] + ".", ""]
    cols = (
        "check",
        "speedup",
        "baseline",
        "delta",
        "candidate us",
        "reference us",
        "MDE",
        "roofline (copy BW)",
        "roofline (spec)",
    )
    for verdict, group in groups:
        lines += [
            f"### {verdict} ({len(group)})",
            "",
            "| " + " | ".join(cols) + " | note |",
            "|" + "---|" * (len(cols) + 1),
        ]
        for r in group:
            c = cells(r)
            note = "" if verdict == Verdict.PASS.value else _note(r)
            if r.quality:
                note = f"quality {r.quality}. {note}".strip()
            if r.update:
                note = f"update: {r.update}. {note}".strip()
            lines.append(
                "| " + " | ".join(c[k].replace("|", "\\|") for k in cols) + f" | {note.replace('|', '/')} |"
            )
        lines.append("")
    return "\n".join(lines)


def junit_properties(row: CheckRow) -> list[tuple[str, str]]:
    """Flat ``(name, value)`` pairs for JUnit ``<properties>`` (one set per check)."""
    r = ReportRow.from_row(row)
    prefix = f"convperf[{r.key}]"
    props = [(f"{prefix}.verdict", r.verdict)]
    for name, value in (
        ("speedup", r.speedup),
        ("baseline_speedup", r.baseline_speedup),
        ("delta", r.delta),
        ("candidate_us", r.candidate_us),
        ("reference_us", r.reference_us),
    ):
        if value is not None:
            props.append((f"{prefix}.{name}", f"{value:.6g}"))
    return props
