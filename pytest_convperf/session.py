"""ConvperfSession: per-session state behind the thin hooks of ``plugin.py``.

Holds the frozen config, the lazily built device fingerprint and timer, and the result rows
of every check. Under pytest-xdist, workers attach their rows to test reports
(``user_properties``) and the controller collects them in ``pytest_runtest_logreport``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_convperf.config import ConvperfConfig
    from pytest_convperf.device import DeviceInfo

ROWS_PROPERTY = "convperf_rows"


class ConvperfSession:
    """State of one pytest session (one per process: controller and each xdist worker)."""

    def __init__(self, config: pytest.Config, cfg: ConvperfConfig) -> None:
        self.config = config
        self.cfg = cfg
        self._device: DeviceInfo | None = None
        self._timer: Any = None
        self._tmp: Path | None = None
        # Rows recorded by checks in this process, by node id, until attached to a report.
        self.pending: dict[str, list[dict[str, Any]]] = {}
        # Rows of the whole run (on the controller: from all workers).
        self.rows: list[dict[str, Any]] = []
        self._finish: Any = None  # finish.Finisher, built at session end

    # ---- lazily built, heavy objects ---------------------------------------------------------
    def device_info(self) -> DeviceInfo:
        if self._device is None:
            from pytest_convperf.device import resolve_device

            self._device = resolve_device(self.cfg.device)
        return self._device

    def timer(self) -> Any:
        """The session's Timer (CUDA, CPU, or fake when $CONVPERF_FAKE_TIMER names a replay file)."""
        if self._timer is None:
            from pytest_convperf.timing import make_timer

            self._timer = make_timer(self.device_info())
        return self._timer

    def timer_callable(self) -> Any:
        from pytest_convperf.timing import make_timer_callable

        return make_timer_callable(self.device_info(), self.timer())

    def report_dir(self) -> Path:
        if self.cfg.report_dir is not None:
            self.cfg.report_dir.mkdir(parents=True, exist_ok=True)
            return self.cfg.report_dir
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="convperf-"))
        return self._tmp

    def trace_dir(self, request: pytest.FixtureRequest) -> Path:
        path = self.report_dir() / "traces"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # ---- rows ------------------------------------------------------------------------------------
    def record(self, nodeid: str, row: dict[str, Any]) -> None:
        """Called by a check: keep the row until the test's report is made."""
        self.pending.setdefault(nodeid, []).append(row)

    def attach_rows(self, item: pytest.Item, report: pytest.TestReport) -> None:
        rows = self.pending.pop(item.nodeid, [])
        if rows:
            report.user_properties.append((ROWS_PROPERTY, rows))
            from pytest_convperf.report import junit_properties

            # Flat per-check results for JUnit <properties>: junitxml reads the teardown report,
            # which copies item.user_properties (so they also travel from xdist workers).
            for row in rows:
                item.user_properties.extend(junit_properties(row))

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect rows from every report: our own, or those a worker sent to this controller."""
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == ROWS_PROPERTY and isinstance(value, list):
                self.rows.extend(value)

    # ---- session end (baselines and reports; written by the controller only) ------------------
    @pytest.hookimpl
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Stop the run before any test when a baseline file is malformed."""
        from pytest_convperf.gate import validate_baselines

        validate_baselines(self.cfg)

    def _finisher(self) -> Any:
        if self._finish is None:
            from pytest_convperf.finish import Finisher

            self._finish = Finisher(self)
        return self._finish

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write planned baseline updates, convperf-update.md and the report (controller only)."""
        self._finisher().sessionfinish()

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Checks grouped by verdict with speedup, CI, baseline and delta."""
        self._finisher().terminal_summary(terminalreporter)


SESSION_KEY = pytest.StashKey[ConvperfSession]()
