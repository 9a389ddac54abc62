"""The report's texts from the rows the controller collected (``check_row.CheckRow``): the terminal
summary, Markdown for people (and ``$GITHUB_STEP_SUMMARY``), JUnit properties. Pure: the files are
written by :mod:`pytest_convperf.reports.report_files`. The rows as displayed are
:mod:`pytest_convperf.reports.report_row`'s, their cells :mod:`pytest_convperf.reports.cells`'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_convperf.core.markdown_safe import code_span
from pytest_convperf.core.results import Verdict
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.reports.cells import cells, fmt_time, ratio_x, roofline_note, speedup_text
from pytest_convperf.reports.report_row import NOT_WRITTEN, ReportRow, fake_timed, grouped


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
        lo, hi = ratio_x(min(speeds)), ratio_x(max(speeds))
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
            # The id and the note (a message naming ids, a reason) come from test code: code spans,
            # so no id pings, links or breaks the row (core.markdown_safe); the numbers as they are.
            shown = [code_span(c[k], table=True) if k == "check" else c[k] for k in cols]
            lines.append("| " + " | ".join(shown) + f" | {code_span(note, table=True) if note else ''} |")
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
