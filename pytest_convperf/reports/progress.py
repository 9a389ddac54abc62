"""Live progress of timed checks in pytest's terminal: the check, which measurement (the first
measurement or its confirm), rounds so far, the current speedup with its 95 % CI, then the
verdict, naming the measurement its numbers come from (``report.measured_by``).

It follows pytest's terminal reporter conventions: nothing with ``-q``; on a terminal one line per
check rewritten in place (``TerminalReporter.rewrite``, as pytest's own "collecting ..." line) and
left as the verdict line; when output is not a terminal, complete lines only (a progress line at
most every ``LINE_INTERVAL_S`` for a long check, then the verdict line); under pytest-xdist the
workers print nothing and the controller prints each check's verdict line when its report arrives
(xdist's own convention: workers have no terminal, the controller reports).

The rounds are watched through :class:`ProgressTimer`, a proxy around the check's Timer that
``timing.rounds`` calls back after each round (``observe_round``); the measurement itself is
untouched. :class:`ProgressPlugin` (registered as ``convperf-progress``) builds the line on first use
and ends each check's line from the ``pytest_convperf_row_recorded`` hook.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_convperf.core import stats
from pytest_convperf.core.config import get_config, is_controller
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.reports.cells import fmt_time, speedup_text
from pytest_convperf.reports.report_row import CONFIRM, FIRST, ReportRow

if TYPE_CHECKING:
    from pytest_convperf.measure.protocol import Timer

LIVE_INTERVAL_S = 0.25  # terminal redraws at most this often
LINE_INTERVAL_S = 30.0  # without a terminal: one complete progress line per check at most this often


@dataclass
class Tally:
    """What one check's rounds have shown so far."""

    check: str
    stage: str = "warm-up"
    passes: int = 0  # timing passes seen: 1 = the screen (first measurement), 2+ = confirm runs
    warmup_rounds: int = 0
    log_ratios: list[float] = field(default_factory=list)

    def observe(self, stage: str, index: int, names: Sequence[str], times: Sequence[float]) -> None:
        if stage != "timing":
            if self.stage != "warm-up" or index == 0:
                self.warmup_rounds = 0
            self.stage = "warm-up"
            self.warmup_rounds += 1
            return
        if index == 0:
            self.passes += 1
            self.log_ratios = []
            self.stage = FIRST if self.passes == 1 else CONFIRM
        if len(times) == 2:
            by_name = dict(zip(names, times))
            cand = by_name.get("candidate", times[0])
            ref = by_name.get("reference", times[1])
            self.log_ratios.append(math.log(cand / ref))

    def text(self) -> str:
        """``test_x[p]: screen, 84 rounds, speedup 0.161x [0.152, 0.170]``."""
        if self.stage == "warm-up":
            return f"{self.check}: warm-up, {self.warmup_rounds} rounds"
        n = len(self.log_ratios)
        line = f"{self.check}: {self.stage}, {n} rounds"
        if n >= 6:  # the order-statistic CI needs a few rounds
            s = stats.paired_summary(self.log_ratios)  # as the result's: over AB/BA pairs
            lo, hi = math.exp(-s.ci[1]), math.exp(-s.ci[0])
            line += f", speedup {math.exp(-s.median):.3f}x [{lo:.3f}, {hi:.3f}]"
        return line


def fmt_duration(seconds: float) -> str:
    """``45 s``, ``3m10s``, ``1h05m``: an elapsed time or an estimate, as a person reads it."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@dataclass
class Pace:
    """Units of a long job done out of its total, and an estimate of the time left: each kind's
    remaining units at the mean duration of that kind's units done so far (a timed check takes
    seconds to minutes, an untimed test milliseconds; one mean for both would mislead). A kind with
    none done yet is estimated at the mean of all units done; nothing done: no estimate."""

    total: dict[str, int] = field(default_factory=dict)
    done: dict[str, int] = field(default_factory=dict)
    spent: dict[str, float] = field(default_factory=dict)

    def finish(self, kind: str, seconds: float) -> None:
        self.done[kind] = self.done.get(kind, 0) + 1
        self.spent[kind] = self.spent.get(kind, 0.0) + seconds

    def count(self, kind: str | None = None) -> tuple[int, int]:
        """(done, total) of one kind, or of all."""
        kinds = [kind] if kind is not None else list(self.total)
        return sum(self.done.get(k, 0) for k in kinds), sum(self.total.get(k, 0) for k in kinds)

    def left_s(self) -> float | None:
        done_all, _ = self.count()
        if done_all == 0:
            return None
        overall = sum(self.spent.values()) / done_all
        left = 0.0
        for kind, total in self.total.items():
            done = self.done.get(kind, 0)
            mean = self.spent[kind] / done if done else overall
            left += max(0, total - done) * mean
        return left

    def eta_text(self) -> str:
        left = self.left_s()
        return "no estimate yet" if left is None else f"about {fmt_duration(left)} left"


def verdict_text(row: CheckRow) -> str:
    """A check's final line:
    ``NEW  test_x[p]  speedup 0.160x [0.137, 0.191]  cand 2.073 ms  ref 355.1 us  (screen,
    63 rounds)``: the measurement named, as the live line names it (a FAIL's numbers are its confirm's)."""
    r = ReportRow.from_row(row)
    line = f"  {r.verdict}  {r.key}"
    if r.speedup is not None:
        line += f"  {speedup_text(r)}"
    if r.candidate_us is not None:
        line += f"  cand {fmt_time(r.candidate_us)}  ref {fmt_time(r.reference_us)}"
    if r.n_rounds:
        line += f"  ({r.measured}, {r.n_rounds} rounds)"
    return line


class ProgressTimer:
    """A Timer proxy: everything goes to the wrapped timer; its ``observe_round`` (the protocol's
    watcher call) feeds ``on_round`` instead of the wrapped timer's no-op."""

    def __init__(self, timer: Timer, on_round: Callable[[str, int, Sequence[str], Sequence[float]], None]):
        self._timer = timer
        self._on_round = on_round

    def __getattr__(self, name: str) -> Any:
        return getattr(self._timer, name)

    def observe_round(self, stage: str, index: int, names: Sequence[str], times: Sequence[float]) -> None:
        self._on_round(stage, index, names, times)


class LiveProgress:
    """Draws the live line of the check in progress on pytest's terminal reporter."""

    def __init__(
        self,
        terminal: Any,
        *,
        verbosity: int,
        live: bool,
        clock: Callable[[], float] = time.monotonic,
        width: Callable[[], int] = lambda: shutil.get_terminal_size().columns,
        uncaptured: Callable[[], AbstractContextManager[object]] = nullcontext,
        prefix: Callable[[], str] = lambda: "",
    ) -> None:
        self.terminal = terminal
        self.prefix = prefix  # the session's pace (``[3/20 checks, about 4m left] ``), on the live line
        # pytest captures output during a test; like its live logging (log_cli) we write around it.
        self.uncaptured = uncaptured
        self.enabled = terminal is not None and verbosity >= 0
        self.verbosity = verbosity
        self.live = live
        self.clock = clock
        self.width = width
        self._tally: Tally | None = None
        self._nodeid = ""
        self._drawn = False
        self._last = -math.inf

    def wrap(self, timer: Timer, nodeid: str, check: str) -> Timer:
        """The check's timer, watched; the timer itself when progress is off."""
        if not self.enabled:
            return timer

        def on_round(stage: str, index: int, names: Sequence[str], times: Sequence[float]) -> None:
            if self._tally is None or self._tally.check != check or self._nodeid != nodeid:
                # A terminal shows the check at once; a log gets a line only for a long check.
                self._last = -math.inf if self.live else self.clock()
                self._tally, self._nodeid, self._drawn = Tally(check), nodeid, False
            self._tally.observe(stage, index, names, times)
            self._update()

        return ProgressTimer(timer, on_round)

    def _update(self) -> None:
        assert self._tally is not None
        now = self.clock()
        interval = LIVE_INTERVAL_S if self.live else LINE_INTERVAL_S
        if now - self._last < interval:
            return
        self._last = now
        with self.uncaptured():
            self._draw("  " + self.prefix() + self._tally.text())

    def _draw(self, text: str) -> None:
        tr = self.terminal
        if self.live:
            if not self._drawn:
                tr.ensure_newline()
            # Never wider than the terminal: a wrapped line cannot be rewritten in place.
            tr.rewrite(text[: max(10, self.width() - 1)], erase=True)
            self._drawn = True
        else:
            tr.write_line(text)

    def done(self, row: CheckRow, nodeid: str, *, after_status: bool = False) -> None:
        """The check's verdict line, replacing its live line (called once per recorded row).

        ``after_status``: pytest has just written the test's status letter on the current line
        (the xdist controller gets the row with the report), so the verdict starts a new line."""
        if not self.enabled:
            return
        if after_status:
            self.terminal.currentfspath = -2
        with self.uncaptured():
            self._finish(verdict_text(row), nodeid)
        self._tally, self._drawn = None, False

    def line(self, text: str, nodeid: str) -> None:
        """A complete line between tests (the session's pace in a log), pytest's line state kept."""
        if self.enabled:
            self._finish(text, nodeid)

    def _finish(self, text: str, nodeid: str) -> None:
        tr = self.terminal
        if self._drawn and self._nodeid == nodeid:
            tr.rewrite(text, erase=True)
        else:
            tr.ensure_newline()
            tr.write(text)
        # Leave pytest's line state as pytest itself would: the next status letter goes on a fresh
        # "<file> " prefix line (pytest's write_fspath_result), and in verbose mode the next
        # write starts a new line (-2 is pytest's own "mid-line, not a path" marker).
        if self.verbosity <= 0:
            tr.currentfspath = None
            tr.write_fspath_result(nodeid, "")
        else:
            tr.currentfspath = -2


# Without a terminal (a CI log): a line of the session's pace at least every this many finished
# checks, and at the end of any test once this many seconds have passed since the last line.
PACE_EVERY_CHECKS = 10
PACE_EVERY_S = 60.0
CHECK, TEST = "check", "test"


class SessionPace:
    """The session's checks done out of those collected, the time spent and an estimate of the time
    left (:class:`Pace`: checks and other tests each at their own mean so far), as pytest's ``[%]``
    does not say it (it moves only at the end of each file: issue 38.2). On a terminal it leads the
    live line of the check in progress; in a log it is a line of its own every
    ``PACE_EVERY_CHECKS`` checks or ``PACE_EVERY_S`` seconds."""

    def __init__(self, checks: set[str], tests: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.checks = checks
        self.pace = Pace(total={CHECK: len(checks), TEST: max(0, tests - len(checks))})
        self.clock = clock
        self.started = clock()
        self._spent: dict[str, float] = {}
        self._last_line = self.started
        self._checks_at_line = 0

    def report(self, nodeid: str, when: str, seconds: float) -> bool:
        """Count a phase's report; True when a test has just finished (its teardown)."""
        self._spent[nodeid] = self._spent.get(nodeid, 0.0) + seconds
        if when != "teardown":
            return False
        self.pace.finish(CHECK if nodeid in self.checks else TEST, self._spent.pop(nodeid))
        return True

    def due(self) -> bool:
        """A log line is due (and counted as written)."""
        done, _ = self.pace.count(CHECK)
        now = self.clock()
        if done - self._checks_at_line < PACE_EVERY_CHECKS and now - self._last_line < PACE_EVERY_S:
            return False
        self._last_line, self._checks_at_line = now, done
        return True

    def prefix(self) -> str:
        """``[3/20 checks, about 4m10s left] ``, the live line's lead."""
        done, total = self.pace.count(CHECK)
        return f"[{done}/{total} checks, {self.pace.eta_text()}] " if total else ""

    def text(self) -> str:
        """``convperf: 12/40 checks, 30/92 tests done in 4m02s; about 8m10s left``."""
        checks, total_checks = self.pace.count(CHECK)
        tests, total_tests = self.pace.count()
        spent = fmt_duration(self.clock() - self.started)
        return (
            f"convperf: {checks}/{total_checks} checks, {tests}/{total_tests} tests done in {spent}; "
            f"{self.pace.eta_text()}"
        )


# The name the plugin object is registered under (``-p no:convperf-progress`` turns the line off).
PLUGIN_NAME = "convperf-progress"


class ProgressPlugin:
    """The live progress line as a plugin: its :class:`LiveProgress` is built on first use (pytest's
    terminal reporter exists only after ``pytest_configure``), off in xdist workers, with ``-q`` and
    without a terminal reporter."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._live: LiveProgress | None = None
        self.session_pace: SessionPace | None = None  # a --convperf session's, from its collection

    @property
    def live(self) -> LiveProgress:
        if self._live is None:
            config = self.config
            tr = config.pluginmanager.get_plugin("terminalreporter")
            capman = config.pluginmanager.get_plugin("capturemanager")
            controller = is_controller(config)
            xdist = not controller or config.pluginmanager.has_plugin("dsession")
            self._live = LiveProgress(
                tr if controller else None,
                verbosity=config.get_verbosity(),
                # Rewritten in place only on a terminal and without xdist (reports arrive interleaved).
                live=tr is not None and bool(tr.isatty()) and not xdist,
                uncaptured=capman.global_and_fixture_disabled if capman is not None else nullcontext,
                prefix=lambda: self.session_pace.prefix() if self.session_pace is not None else "",
            )
        return self._live

    def _start(self, checks: set[str], tests: int) -> None:
        if get_config(self.config).enabled and is_controller(self.config) and tests:
            self.session_pace = SessionPace(checks, tests)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """This session's checks: tests marked ``convperf`` (a test using its fixture is marked too)."""
        checks = {item.nodeid for item in session.items if item.get_closest_marker("convperf") is not None}
        self._start(checks, len(session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """Under xdist the controller collects nothing: the first worker's ids, each counted a test
        (the controller cannot see markers: the estimate is one mean over all)."""
        if self.session_pace is None:
            self._start(set(), len(ids))

    @pytest.hookimpl(trylast=True)  # after pytest's own status letter
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """After each finished test: in a log, the session's pace line when it is due."""
        pace = self.session_pace
        if pace is None or not pace.report(report.nodeid, report.when, report.duration):
            return
        live = self.live
        if not live.live and pace.due():
            live.line(pace.text(), report.nodeid)

    def pytest_convperf_row_recorded(self, row: CheckRow, nodeid: str, from_worker: bool) -> None:
        """The check's verdict line (a worker's, on the controller, after pytest's status letter)."""
        self.live.done(row, nodeid, after_status=from_worker)
