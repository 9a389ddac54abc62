"""ConvperfSession: per-session state behind the thin hooks of ``plugin.py``.

Holds the frozen config, the lazily built device fingerprint, timer and baseline stores, and
the result rows of every check. Under pytest-xdist, workers attach their rows to test reports
(``user_properties``) and the controller collects them in ``pytest_runtest_logreport``. At
session end the controller alone applies the planned baseline updates
(:func:`pytest_convperf.updates.apply_updates`) and writes the reports (the
``pytest_convperf_write_report`` hook), then prints the terminal summary.
"""

from __future__ import annotations

import datetime as _dt
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_convperf import journal
from pytest_convperf.baselines import Store, resolve_machine, validate_tree
from pytest_convperf.results import CheckRow
from pytest_convperf.sections import SECTIONS_PROPERTY, ReportSections, Section, write_sections

if TYPE_CHECKING:
    from pytest_convperf.config import ConvperfConfig
    from pytest_convperf.device import DeviceInfo

ROWS_PROPERTY = "convperf_rows"  # the rows of one test, on its report
FAKE_SUFFIX = "-fake"


def is_controller(config: pytest.Config) -> bool:
    """True in a plain run and in the xdist controller; False in an xdist worker."""
    return not hasattr(config, "workerinput")


class ConvperfSession:
    """State of one pytest session (one per process: controller and each xdist worker)."""

    def __init__(self, config: pytest.Config, cfg: ConvperfConfig) -> None:
        self.config = config
        self.cfg = cfg
        self._device: DeviceInfo | None = None
        self._timer: Any = None
        self._tmp: Path | None = None
        # Rows recorded by checks in this process, by node id, until attached to a report.
        self.pending: dict[str, list[CheckRow]] = {}
        # Rows of the whole run (on the controller: from all workers).
        self.rows: list[CheckRow] = []
        self.sections = ReportSections()  # this process's report sections, until a report carries them
        self.all_sections: list[Section] = []  # on the controller: from every process
        self.section_paths: list[Path] = []
        self._stores: dict[bool, Store] = {}
        self.notes: list[str] = []  # session-end notes for the terminal summary
        self.update_md: Path | None = None
        self._finished = False

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

    def store(self, *, fake: bool = False) -> Store:
        """The baseline store of this machine class (built on first use).

        ``fake``: the check was timed by the fake timer. Unless ``--convperf-machine`` names the
        folder explicitly (the opt-in the plugin's own tests use), fake numbers are read from and
        written to ``<machine>-fake``, so they can never land in a real machine's baselines.
        """
        if fake not in self._stores:
            cfg = self.cfg
            machine = resolve_machine(self.device_info().slug, cfg.machine, cfg.machine_aliases)
            if fake and cfg.machine is None and not machine.endswith(FAKE_SUFFIX):
                machine += FAKE_SUFFIX
            self._stores[fake] = Store(cfg.baselines_dir, machine)
        return self._stores[fake]

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
    def record(self, nodeid: str, row: CheckRow) -> None:
        """Called once per check, after its judgement: journal the row (with ``--convperf-report``),
        and keep it until the test's report is made."""
        if self.cfg.report_dir is not None:
            journal.append(self.cfg.report_dir, row.to_dict())
        self.pending.setdefault(nodeid, []).append(row)

    def attach_rows(self, item: pytest.Item, report: pytest.TestReport) -> None:
        rows = self.pending.pop(item.nodeid, [])
        if rows:
            # The JSON-able form: xdist sends user_properties from a worker to the controller.
            dicts = [row.to_dict() for row in rows]
            report.user_properties.append((ROWS_PROPERTY, dicts))
            from pytest_convperf.report import junit_properties

            # Flat per-check results for JUnit <properties>: junitxml reads the teardown report,
            # which copies item.user_properties (so they also travel from xdist workers).
            for row in dicts:
                item.user_properties.extend(junit_properties(row))

    def attach_sections(self, report: pytest.TestReport) -> None:
        """Report sections added since the last report ride on this one (any phase: a module
        fixture adds its tables in the teardown of the module's last test)."""
        sections = self.sections.take()
        if sections:
            report.user_properties.append((SECTIONS_PROPERTY, sections))

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect rows and sections from every report: our own, or those a worker sent to this controller."""
        for name, value in report.user_properties:
            if name == ROWS_PROPERTY and report.when == "call" and isinstance(value, list):
                self.rows.extend(CheckRow.from_dict(row) for row in value)
            elif name == SECTIONS_PROPERTY and isinstance(value, list):
                self.all_sections.extend(Section(**s) for s in value)

    # ---- session end (baselines and reports; written by the controller only) ------------------
    @pytest.hookimpl(tryfirst=True)  # before xdist starts workers that would journal
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Stop the run (``UsageError``) before any test when a baseline file is malformed."""
        if self.cfg.enabled:
            validate_tree(self.cfg.baselines_dir)
            if self.cfg.report_dir is not None and is_controller(self.config):
                journal.start(self.cfg.report_dir)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write planned baseline updates, convperf-update.md and the report (controller only)."""
        if self._finished or not is_controller(self.config):
            return
        self._finished = True
        self.section_paths = write_sections(self.report_dir(), self.all_sections)
        if not self.cfg.enabled:
            return
        from pytest_convperf.updates import apply_updates, commit_info

        cfg = self.cfg
        if cfg.report_dir is not None:  # rows of a worker that crashed after its check
            lost = journal.missing((row.to_dict() for row in self.rows), journal.read(cfg.report_dir))
            self.rows.extend(CheckRow.from_dict(row) for row in lost)
        rows = [row.to_dict() for row in self.rows]  # the form rows.json and report plugins read
        out_dir = cfg.report_dir if cfg.report_dir is not None else cfg.rootdir
        self.update_md = apply_updates(cfg, rows, out_dir)
        if cfg.report_dir is not None and rows:
            when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
            for notes in self.config.hook.pytest_convperf_write_report(
                rows=rows,
                report_dir=cfg.report_dir,
                machine_info=self.machine_info(rows),
                commit_info=commit_info(cfg.rootdir),
                when=when,
            ):
                self.notes += notes or []

    def machine_info(self, rows: Sequence[Any]) -> dict[str, Any]:
        """pytest-benchmark's ``machine_info`` with the device facts (GPU name, clocks, versions)."""
        info: dict[str, Any] = {"machine": rows[0].get("machine") if rows else None}
        try:
            device = self.device_info()
        except Exception as exc:  # the report must not fail because the device cannot be queried again
            info["device_error"] = str(exc)
            return info
        info.update(device="cuda" if device.is_cuda else "cpu", name=device.name, slug=device.slug)
        info.update(
            {k: v for k, v in device.facts.items() if isinstance(v, (str, int, float, bool)) or v is None}
        )
        return info

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Checks grouped by verdict with speedup, CI, baseline and delta; where report sections went."""
        if not is_controller(self.config):
            return
        for path in self.section_paths:
            terminalreporter.write_line(f"convperf report section: {path}")
        if not self.cfg.enabled:
            return
        rows = [row.to_dict() for row in self.rows]
        if not rows and not self.update_md:
            return
        from pytest_convperf.report import grouped, terminal_lines

        tr = terminalreporter
        counts = ", ".join(f"{v} {len(g)}" for v, g in grouped(rows))
        tr.write_sep("=", f"convperf: {counts}" if counts else "convperf")
        for line in terminal_lines(rows):
            tr.write_line(line)
        if self.update_md is not None:
            tr.write_line(f"baseline update written for review: {self.update_md}")
        if self.cfg.report_dir is not None and rows:
            tr.write_line(f"convperf report: {self.cfg.report_dir}")
        for note in self.notes:
            tr.write_line(f"note: {note}")


SESSION_KEY = pytest.StashKey[ConvperfSession]()
