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
from pytest_convperf.core.config import is_controller
from pytest_convperf.core.results import CheckRow
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
    ) -> None:
        self.terminal = terminal
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
            self._draw("  " + self._tally.text())

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


# The name the plugin object is registered under (``-p no:convperf-progress`` turns the line off).
PLUGIN_NAME = "convperf-progress"


class ProgressPlugin:
    """The live progress line as a plugin: its :class:`LiveProgress` is built on first use (pytest's
    terminal reporter exists only after ``pytest_configure``), off in xdist workers, with ``-q`` and
    without a terminal reporter."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._live: LiveProgress | None = None

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
            )
        return self._live

    def pytest_convperf_row_recorded(self, row: CheckRow, nodeid: str, from_worker: bool) -> None:
        """The check's verdict line (a worker's, on the controller, after pytest's status letter)."""
        self.live.done(row, nodeid, after_status=from_worker)
