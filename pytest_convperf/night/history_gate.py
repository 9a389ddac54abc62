"""History gates (issue 36 item 2): a confirmed step at the end of a check's series is a finding of the
night, even where every session alone was ADVISORY.

A check's series is its ``ln(time ratio)`` per session in ``history.jsonl`` (``history``'s change
points: PELT with its persistence rule, every segment at least ``PERSIST`` runs, a step whose 95 %
Welch CI holds 0 is no change). The last step of the series, the one whose later segment runs to
tonight, is

- ``HISTORY_FAIL`` when it is slower beyond the check's tolerance (5 % CPU, 2 % GPU) with its CI above
  0: the session fails, the summary, ``history_findings.json`` (alerts) and the dashboard say it;
- ``HISTORY_IMPROVED`` when faster beyond the tolerance with its CI below 0: reported, never failed.

A step acknowledged by a new recording (the entry the runs after it were judged against differs from
the one before it) is no finding: its baseline update is the decision. Pure reading of the history:
:func:`findings` is what the dashboard's "Last night" box and ``.ci/regression_issues.py`` show.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from pytest_convperf.night.history import (
    PERSIST,
    WINDOW,
    ChangePoint,
    Point,
    change_points,
    read_history_records,
    series_from_records,
    usable_record,
)

if TYPE_CHECKING:
    from pytest_convperf.judge.check_row import CheckRow

HISTORY_FAIL = "HISTORY_FAIL"
HISTORY_IMPROVED = "HISTORY_IMPROVED"
FINDINGS_FILE = "history_findings.json"
# The check's tolerance by device kind: the device defaults of ``judge.verdict.default_policy``
# (CPU 5 %, GPU 2 %); a record without a kind is judged by the wider one.
TOLERANCE = {"cuda": 0.02, "cpu": 0.05}


class HistoryFindingDict(TypedDict):
    """A finding as the gate's JSON file holds it (:meth:`HistoryFinding.to_dict`)."""

    verdict: str
    machine: str
    module: str | None
    key: str
    step: float
    ci: list[float]
    tolerance: float
    ratio_before: float
    ratio_after: float
    n_before: int
    n_after: int
    commit_before: str | None
    commit_after: str | None
    when: str
    message: str


@dataclass(frozen=True)
class HistoryFinding:
    """A confirmed step at the end of one check's series: its verdict, the step, the commit range."""

    verdict: str
    module: str | None
    change: ChangePoint
    tolerance: float
    commit_before: str | None  # the last run's commit before the step
    commit_after: str | None  # the first run's commit after it

    @property
    def failing(self) -> bool:
        return self.verdict == HISTORY_FAIL

    def line(self) -> str:
        c = self.change
        what = "slower" if c.step > 0 else "faster"
        return (
            f"{self.verdict}: {c.key} [{c.machine}]: {what} by {abs(c.step) * 100:.1f} % "
            f"(95 % CI {c.ci[0] * 100:+.1f} .. {c.ci[1] * 100:+.1f} %, "
            f"tolerance {self.tolerance * 100:.0f} %) over {c.n_after} runs after {c.n_before} before; "
            f"time ratio {c.ratio_before:.4g} -> {c.ratio_after:.4g}; "
            f"commits {self.commit_before or 'unknown'}..{self.commit_after or 'unknown'}"
        )

    def to_dict(self) -> HistoryFindingDict:
        c = self.change
        return HistoryFindingDict(
            verdict=self.verdict,
            machine=c.machine,
            module=self.module,
            key=c.key,
            step=c.step,
            ci=list(c.ci),
            tolerance=self.tolerance,
            ratio_before=c.ratio_before,
            ratio_after=c.ratio_after,
            n_before=c.n_before,
            n_after=c.n_after,
            commit_before=self.commit_before,
            commit_after=self.commit_after,
            when=c.when,
            message=self.line(),
        )


def _grouped(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """The records of each check's series, in the order of :func:`series_from_records`'s points
    (the same filter, the same stable sort by time)."""
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for rec in records:
        if usable_record(rec):
            out.setdefault((str(rec.get("machine") or "unknown"), str(rec["key"])), []).append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: str(r.get("when") or ""))
    return out


def findings_of_records(
    records: Sequence[Mapping[str, Any]], *, persist: int = PERSIST, window: int = WINDOW
) -> list[HistoryFinding]:
    """The findings of history records (see the module docstring)."""
    series = series_from_records(records)
    recs = _grouped(records)
    out: list[HistoryFinding] = []
    for (machine, key), points in sorted(series.items()):
        recent: list[Point] = points[-window:] if window else points
        mine = recs[(machine, key)][-len(recent) :]
        cps = change_points(machine, key, recent, persist=persist)
        if not cps or len(mine) != len(recent):
            continue
        last = max(cps, key=lambda c: c.index)
        if mine[last.index - 1].get("entry") != mine[-1].get("entry"):
            continue  # re-recorded after the step: acknowledged
        tol = TOLERANCE.get(str(mine[-1].get("device_kind") or "cpu"), max(TOLERANCE.values()))
        if last.step > tol and last.ci[0] > 0:
            verdict = HISTORY_FAIL
        elif last.step < -tol and last.ci[1] < 0:
            verdict = HISTORY_IMPROVED
        else:
            continue
        module = mine[-1].get("module")
        out.append(
            HistoryFinding(
                verdict,
                str(module) if module is not None else None,
                last,
                tol,
                recent[last.index - 1].commit,
                recent[last.index].commit,
            )
        )
    return out


def findings(report_dir: Path, only: Collection[tuple[str, str]] | None = None) -> list[HistoryFinding]:
    """The history findings of a report folder's ``history.jsonl`` (none when it has none), of the
    checks ``only`` ((machine, key); None: all): the dashboard's "Last night" box and the session's
    gate read them here."""
    file = report_dir / "history.jsonl" if report_dir.is_dir() else report_dir
    if not file.is_file():
        return []
    records, _ = read_history_records(file)
    if only is not None:
        wanted = set(only)
        records = [r for r in records if (str(r.get("machine") or "unknown"), str(r.get("key"))) in wanted]
    return findings_of_records(records)


def gate(report_dir: Path, rows: Sequence[CheckRow]) -> tuple[bool, list[str]]:
    """The session's history gate, after its ``history.jsonl`` record was appended: the findings of
    tonight's checks written to ``history_findings.json``; (whether one fails the session, the
    summary's lines). Never raises: a history this code cannot read costs a note, not the night."""
    tonight = {(row.machine or "unknown", row.key) for row in rows}
    try:
        found = findings(report_dir, tonight)
        write_findings(report_dir, found)
    except ImportError:  # ruptures missing: the change-point note already names the install
        return False, [
            "note: history gate not run: it needs the change-point library (the note on change points)"
        ]
    except Exception as exc:  # an unreadable history, a full disk
        return False, [f"note: history gate not run: {type(exc).__name__}: {exc}"]
    return any(f.failing for f in found), summary_lines(found)


def write_findings(report_dir: Path, found: Sequence[HistoryFinding]) -> Path:
    """``history_findings.json`` beside ``rows.json``: what ``.ci/regression_issues.py`` alerts on."""
    path = report_dir / FINDINGS_FILE
    path.write_text(json.dumps([f.to_dict() for f in found], indent=1) + "\n", encoding="utf-8")
    return path


def summary_lines(found: Sequence[HistoryFinding]) -> list[str]:
    lines = [f"convperf history: {f.line()}" for f in found]
    failing = [f for f in found if f.failing]
    if failing:
        lines.append(
            f"convperf: the session FAILS: {len(failing)} check(s) stepped slower across sessions "
            "(history gate; each session alone may have passed). If intended, re-record them with "
            "--convperf-update-baselines --convperf-reason=..."
        )
    return lines
