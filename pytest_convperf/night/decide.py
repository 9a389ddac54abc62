"""The session's verdict at its end: speed FAILs decided together, change points new in this run.

A check's own rule (``verdict.decide``) says FAIL when its confirm stage rejects "slowdown <=
tolerance" at its own level. Under session-wide control (``--convperf-false-alarms=holm|bh``) that
per-check FAIL is decided with every other check of the session (``multiplicity.control``): its
test is reported ``speed FAIL pending`` when it runs (:func:`pending_speed_fail`, pytest's status
of the test), not failed at once. A FAIL the controller keeps stays FAIL and fails the session
(exit status 1, its test counted failed in pytest's last line); one it does not keep becomes
``SUSPECT`` in every report, with its adjusted p-value, and its test counts as passed. Why
deferred and not failed at once: docs/statistics.md ("How a session-wide FAIL reaches pytest").
Pure functions on ``CheckRow``s and row dicts, and :class:`FalseAlarmControl`, the plugin object
(``convperf-false-alarms``) that applies them at session end through convperf's hooks; no torch.
(The module keeps its name: ``night.json`` and the nightly CI job read its output.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_convperf.core.config import CONFIG_KEY, ConvperfConfig
from pytest_convperf.core.markdown_safe import code_span
from pytest_convperf.core.options import Method
from pytest_convperf.core.results import Verdict
from pytest_convperf.judge.check_row import ROWS_PROPERTY, CheckRow
from pytest_convperf.judge.decision import CONFIRM_Q
from pytest_convperf.night.multiplicity import NightControl, check_id, checks_from_rows, control

SUSPECT = Verdict.SUSPECT
NIGHT_FILE = "night.json"
# pytest's status of a test whose speed FAIL awaits the session's decision (its stats category).
PENDING = "speed FAIL pending"
PENDING_WORD = "SPEED FAIL (pending the session's decision)"
_NAMES = {"holm": "Holm", "bh": "Benjamini-Hochberg"}


def judge_night(
    rows: Sequence[CheckRow], *, method: Method, alpha: float
) -> tuple[list[CheckRow], NightControl]:
    """The rows as the night decided them, and the controller's answer.

    Every family row gains ``night`` (``adjusted_p``, ``kept``); a per-check FAIL the night does
    not keep gets verdict ``SUSPECT`` and a message saying why. Other rows are returned as they are.
    """
    night = control(checks_from_rows(rows), method=method, alpha=alpha, per_check_alpha=1 - CONFIRM_Q)
    cleared = set(night.cleared)
    out: list[CheckRow] = []
    for row in rows:
        ident = check_id(row)
        if ident in night.adjusted:
            row = replace(
                row,
                night={
                    "method": method,
                    "alpha": alpha,
                    "adjusted_p": night.adjusted[ident],
                    "kept": ident in night.fails,
                },
            )
        if ident in cleared:
            message = (
                f"SUSPECT: slower by its own rule but not significant across the session "
                f"({_NAMES.get(method, method)}-adjusted p {night.adjusted[ident]:.3g} > {alpha:g} over "
                f"{night.m} checks); not a failure. {row.message or ''}"
            ).strip()
            row = replace(row, verdict=SUSPECT, message=message)
        out.append(row)
    return out, night


def night_lines(night: NightControl, rows: Sequence[CheckRow]) -> list[str]:
    """Terminal and report lines: the expectation, then the FAILs the night kept and those it cleared."""
    lines = [night.summary()]
    by_id = {check_id(r): r for r in rows}
    if night.method != "none":
        for ident in night.fails:
            p = night.adjusted[ident]
            lines.append(f"speed FAIL kept across the session (adjusted p {p:.3g}): {ident}")
        for ident in night.cleared:
            p = night.adjusted[ident]
            lines.append(f"SUSPECT, not significant across the session (adjusted p {p:.3g}): {ident}")
    elif night.fails:
        lines += [f"speed FAIL (own rule only): {i}" for i in night.fails if i in by_id]
    return lines


def new_change_point_lines(report_dir: Path) -> tuple[list[str], list[str]]:
    """Change points that became certain tonight (``history.jsonl`` already appended), and notes: the
    history's lines that were skipped, or why no change point was computed. Never raises: tonight's
    report is written whatever an earlier run left in the history."""
    from pytest_convperf.core.jsonl import summary
    from pytest_convperf.night.history import read_history, recent_change_points

    try:
        series, skipped = read_history(report_dir)
        # Each check's last WINDOW runs: a step new tonight lies there, and PELT's cost grows with
        # the square of the series (1,000 runs of one check took 8 s; a night has hundreds).
        cps = recent_change_points(series)
    except (FileNotFoundError, ImportError) as exc:
        return [], [f"change points not computed: {exc}"]
    except Exception as exc:  # a history this code cannot handle must not cost the night's reports
        return [], [f"change points not computed: {type(exc).__name__}: {exc}"]
    return [c.line() for c in cps if c.new], [f"history.jsonl: {line}" for line in summary(skipped)]


def night_markdown(night: Mapping[str, Any] | None, change_points: Sequence[str]) -> str:
    """The report's "Session" section: expectation, kept FAILs, SUSPECTs, change points new in this run."""
    lines = ["### Session", ""]
    if night:
        lines += [str(night.get("summary", "")), ""]
        for ident in night.get("fails") or []:
            lines.append(f"- speed FAIL kept: {code_span(ident)} (adjusted p {night['adjusted'][ident]:.3g})")
        for ident in night.get("cleared") or []:
            lines.append(
                f"- SUSPECT (not significant across the session): {code_span(ident)} "
                f"(adjusted p {night['adjusted'][ident]:.3g})"
            )
        if night.get("fails") or night.get("cleared"):
            lines.append("")
    lines += [f"Change points new in this run: {len(change_points)}", ""]
    lines += [f"- {code_span(line)}" for line in change_points]  # a line names its check's id
    return "\n".join(lines).rstrip() + "\n"


def pending_speed_fail(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a passed test's rows (their dict form) hold a speed FAIL the session decides at its
    end: a FAIL whose update neither acknowledged nor refused the change (those decide the test)."""
    return any(
        row.get("verdict") == "FAIL" and (row.get("update") or {}).get("action") not in ("write", "refused")
        for row in rows
    )


def deferred_fails(rows: Sequence[CheckRow], night: NightControl) -> list[str]:
    """Kept speed FAILs whose test did not already fail (a written update acknowledges its change)."""
    kept = set(night.fails)
    return [check_id(r) for r in rows if check_id(r) in kept and r.planned not in ("write", "refused")]


# The name this plugin object is registered under (``-p no:convperf-false-alarms`` leaves it out).
PLUGIN_NAME = "convperf-false-alarms"


class FalseAlarmControl:
    """The session's false-alarm control as a plugin (controller only, with ``--convperf``).

    A speed FAIL's test is reported ``speed FAIL pending`` while it runs; at session end
    (``pytest_convperf_modify_rows``, trylast: after the fresh-process confirm and any other
    change) every FAIL is decided together; in the terminal summary the pending tests are counted
    failed or passed.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.control: NightControl | None = None
        self.failed: list[str] = []  # kept speed FAILs whose test did not already fail
        self._kept_nodeids: set[str] = set()

    @property
    def cfg(self) -> ConvperfConfig:
        """The session's config (``CONFIG_KEY``), not a copy: session start reads the environment again."""
        return self.config.stash[CONFIG_KEY]

    @pytest.hookimpl(trylast=True)
    def pytest_convperf_modify_rows(self, session: pytest.Session, rows: list[CheckRow]) -> None:
        cfg = self.cfg
        decided, self.control = judge_night(rows, method=cfg.false_alarms, alpha=cfg.false_alarm_level)
        rows[:] = decided
        if self.cfg.false_alarms == "none":
            return
        self.failed = deferred_fails(decided, self.control)
        kept = set(self.failed)
        self._kept_nodeids = {r.nodeid for r in decided if check_id(r) in kept}
        if self.failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_convperf_summary_lines(self, rows: Sequence[CheckRow]) -> list[str]:
        lines = night_lines(self.control, rows) if self.control is not None and self.control.m else []
        if self.failed:
            lines.append(
                f"convperf: the session FAILS: {len(self.failed)} speed FAIL(s) kept across the "
                "session (reported 'speed FAIL pending' when they ran; the decision needed every check); "
                "pytest counts their tests failed"
            )
        return lines

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(
        self, report: pytest.TestReport
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        """A test whose speed FAIL awaits the session's decision is not reported passed: it is
        ``speed FAIL pending`` (letter ``F``) until :meth:`count_decided` counts it failed or passed."""
        if self.cfg.false_alarms == "none" or report.when != "call" or not report.passed:
            return None
        props = report.user_properties
        lists = [value for name, value in props if name == ROWS_PROPERTY and isinstance(value, list)]
        rows = [row for value in lists for row in value]
        if not pending_speed_fail(rows):
            return None
        return PENDING, "F", (PENDING_WORD, {"red": True})

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        # Before pytest's short summary and last line, which then count these tests as failed.
        self.count_decided(terminalreporter.stats)

    def count_decided(self, stats: dict[str, list[Any]]) -> None:
        """Pending tests as the session decided them, in pytest's own counts: a test with a kept speed
        FAIL is failed (pytest's short summary names it, its last line counts it), any other passed."""
        for report in stats.pop(PENDING, []):
            if report.nodeid in self._kept_nodeids:
                report.outcome = "failed"
                report.longrepr = (
                    "speed FAIL kept by the session's false-alarm control (see the convperf summary)"
                )
                stats.setdefault("failed", []).append(report)
            else:
                stats.setdefault("passed", []).append(report)
