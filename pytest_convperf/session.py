"""ConvperfSession: per-session state behind the thin hooks of ``plugin.py``.

Reads the frozen config where every convperf plugin reads it (``config.stash[CONFIG_KEY]``,
replaced once at session start) and holds its state in four typed parts: the rows of every check
(:class:`RowState`), the report sections (:class:`SectionState`), how the session ends
(:class:`SessionEnd`) and the lazily built device fingerprint, timer and baseline stores
(:class:`Built`). Under pytest-xdist, workers attach their rows to test reports
(``user_properties``) and the controller collects them in ``pytest_runtest_logreport``. At
session end the controller alone applies the planned baseline updates
(:func:`pytest_convperf.baselines.updates.apply_updates`) and writes the reports (the
``pytest_convperf_write_report`` hook), then prints the terminal summary. The optional features
(A/B, fresh confirm, false-alarm control, cliffs, live progress) are plugin objects of their own,
reached through convperf's hooks (``hookspecs.py``).
"""

from __future__ import annotations

import datetime as _dt
import functools
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_convperf.baselines.store import Store, refuse_shared_keys, validate_files
from pytest_convperf.core.config import CONFIG_KEY, is_controller
from pytest_convperf.core.files import check_output_paths
from pytest_convperf.core.slugs import resolve_machine
from pytest_convperf.header import baseline_lines, interrupted_note
from pytest_convperf.judge.check_row import ROWS_PROPERTY, CheckRow
from pytest_convperf.night.machine_noise import noise_lines
from pytest_convperf.reports import journal
from pytest_convperf.reports.sections import SECTIONS_PROPERTY, ReportSections, Section, write_sections

if TYPE_CHECKING:
    from pytest_convperf.core.config import ConvperfConfig
    from pytest_convperf.core.device import DeviceFact, DeviceInfo
    from pytest_convperf.night.fresh_confirm import ConfirmRun
    from pytest_convperf.reports.progress import LiveProgress

FAKE_SUFFIX = "-fake"


@dataclass
class RowState:
    """The check rows: this process's until a test's report carries them, the whole run's, and the
    session end's."""

    # Rows recorded by checks in this process, by node id, until attached to a report.
    pending: dict[str, list[CheckRow]] = field(default_factory=dict)
    # Rows of the whole run (on the controller: from all workers).
    run: list[CheckRow] = field(default_factory=list)
    # At session end (controller): the rows as the session's plugins left them
    # (``pytest_convperf_modify_rows``) and the updates marked written.
    final: list[CheckRow] | None = None

    def shown(self) -> list[CheckRow]:
        """What the summary shows: the final rows, or the run's should the session end stop early."""
        return self.final if self.final is not None else self.run


@dataclass
class SectionState:
    """The report sections (``convperf_report``): this process's until a report carries them, every
    process's on the controller, and where they went at session end."""

    own: ReportSections = field(default_factory=ReportSections)
    received: list[Section] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    unwritten: list[str] = field(default_factory=list)  # the files of a session without a report folder


@dataclass
class SessionEnd:
    """How the session ends and what its terminal summary says beside the rows."""

    finished: bool = False
    # Set by pytest_keyboard_interrupt alone: pytest's INTERRUPTED exit status also means a
    # collection error ("Interrupted: 1 error during collection"), which is no Ctrl-C (issue 38.5).
    ctrl_c: bool = False
    interrupted: str | None = None  # the terminal's line after Ctrl-C
    notes: list[str] = field(default_factory=list)  # session-end notes for the terminal summary
    update_md: Path | None = None  # the baseline update written for review
    history_lines: list[str] = field(default_factory=list)  # night.history_gate's findings (issue 36.2)


@dataclass
class Built:
    """What the session makes or does once, on first use: the heavy objects, and the xdist
    controller's validation of the baseline files."""

    device: DeviceInfo | None = None
    timer: Any = None
    tmp: Path | None = None  # the report folder without --convperf-report
    stores: dict[bool, Store] = field(default_factory=dict)  # by ``fake``
    no_progress: LiveProgress | None = None  # the silent progress line without its plugin
    validated: bool = False  # the xdist controller validated the baseline files (once)


class ConvperfSession:
    """State of one pytest session (one per process: controller and each xdist worker)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows = RowState()
        self.sections = SectionState()
        self.end = SessionEnd()
        self.built = Built()

    @property
    def cfg(self) -> ConvperfConfig:
        """The session's config, the one every convperf plugin reads (``config.stash[CONFIG_KEY]``):
        ``pytest_configure``'s, and from session start with the environment read again."""
        return self.config.stash[CONFIG_KEY]

    # ---- lazily built, heavy objects ---------------------------------------------------------
    @functools.cached_property
    def confirm_run(self) -> ConfirmRun | None:
        """In the fresh pytest process that confirms the controller's speed FAILs: what to measure."""
        from pytest_convperf.night.fresh_confirm import ConfirmRun

        return ConfirmRun.from_option(self.cfg.confirm_run)

    def device_info(self) -> DeviceInfo:
        if self.built.device is None:
            from pytest_convperf.core.device import resolve_device

            self.built.device = resolve_device(self.cfg.device, threads=self.cfg.cpu_threads)
        return self.built.device

    def timer(self) -> Any:
        """The session's Timer (CUDA, CPU, or fake when $CONVPERF_FAKE_TIMER names a replay file)."""
        if self.built.timer is None:
            from pytest_convperf.measure.timers import make_timer

            self.built.timer = make_timer(self.device_info(), self.cfg)
        return self.built.timer

    def progress(self) -> LiveProgress:
        """The live progress line of timed checks (the ``convperf-progress`` plugin's; off in xdist
        workers, with -q, without a terminal, and when ``-p no:convperf-progress`` leaves it out)."""
        # Imported here, as plugin.py imports each optional feature where it registers it.
        from pytest_convperf.reports.progress import PLUGIN_NAME, LiveProgress, ProgressPlugin

        plugin = self.config.pluginmanager.get_plugin(PLUGIN_NAME)
        if isinstance(plugin, ProgressPlugin):
            return plugin.live
        if self.built.no_progress is None:
            self.built.no_progress = LiveProgress(None, verbosity=0, live=False)
        return self.built.no_progress

    def header_lines(self, *, fake: bool) -> list[str]:
        """What a run will do, before it does it: the resolved device, the machine folder and whether
        it holds baselines yet (and how to record them), what this run updates."""
        cfg = self.cfg
        try:
            device = self.device_info()
        except Exception as exc:  # the header must not hide the error the first check will report
            return [f"convperf: device {cfg.device} could not be resolved: {exc}"]
        store = self.store(fake=fake)
        folder = store.root / store.machine
        chosen = "" if cfg.device == "auto" else f" (--convperf-device={cfg.device})"
        update = ",".join(sorted(cfg.update)) if cfg.update else "no"
        timer = ", timer fake timer (replayed durations, not measurements)" if fake else ""
        where = f"device {device.kind} ({device.name}){chosen}, machine {store.machine}"
        return [
            f"convperf: {where}, update {update}{timer}",
            *baseline_lines(folder, updating=bool(cfg.update)),
            *noise_lines(cfg.report_dir, store.machine, device.kind),
        ]

    def store(self, *, fake: bool = False) -> Store:
        """The baseline store of this machine class (built on first use).

        ``fake``: the check was timed by the fake timer. Fake numbers are read from and written to
        ``<machine>-fake`` whenever the folder would be the detected machine's (or its alias
        class's), also when ``--convperf-machine`` names it, so they never land in a real
        machine's baselines; only another explicit name (the plugin's own tests use ``testbox``)
        keeps them in that folder.
        """
        if fake not in self.built.stores:
            cfg = self.cfg
            self.built.stores[fake] = Store(
                cfg.baselines_dir, machine_name(cfg, self.device_info().slug, fake=fake)
            )
        return self.built.stores[fake]

    def report_dir(self) -> Path:
        if self.cfg.report_dir is not None:
            self.cfg.report_dir.mkdir(parents=True, exist_ok=True)
            return self.cfg.report_dir
        if self.built.tmp is None:
            self.built.tmp = Path(tempfile.mkdtemp(prefix="convperf-"))
        return self.built.tmp

    def trace_dir(self) -> Path:
        path = self.report_dir() / "traces"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # ---- rows ------------------------------------------------------------------------------------
    def record(self, nodeid: str, row: CheckRow) -> None:
        """Called once per check, after its judgement: journal the row (with ``--convperf-report``),
        and keep it until the test's report is made."""
        if self.cfg.report_dir is not None:
            try:
                journal.append(self.cfg.report_dir, row.to_dict())
            except OSError as exc:  # a full disk: the row still reaches rows.json through the report
                self.end.notes.append(f"journal: the row of {nodeid} ({row.key}) was not journalled: {exc}")
        self.rows.pending.setdefault(nodeid, []).append(row)
        if is_controller(self.config):
            self.config.hook.pytest_convperf_row_recorded(row=row, nodeid=nodeid, from_worker=False)

    def attach_rows(self, item: pytest.Item, report: pytest.TestReport) -> None:
        rows = self.rows.pending.pop(item.nodeid, [])
        if rows:
            # The JSON-able form: xdist sends user_properties from a worker to the controller.
            dicts = [row.to_dict() for row in rows]
            report.user_properties.append((ROWS_PROPERTY, dicts))
            from pytest_convperf.reports.report import junit_properties

            # Flat per-check results for JUnit <properties>: junitxml reads the teardown report,
            # which copies item.user_properties (so they also travel from xdist workers).
            for row in rows:
                item.user_properties.extend(junit_properties(row))

    def attach_sections(self, report: pytest.TestReport) -> None:
        """Report sections added since the last report ride on this one (setup, call or teardown: a module
        fixture adds its tables in the teardown of the module's last test)."""
        sections = self.sections.own.take()
        if sections:
            report.user_properties.append((SECTIONS_PROPERTY, sections))

    @pytest.hookimpl(trylast=True)  # after pytest's status letter: a worker's verdict line follows it
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect rows and sections from every report: our own, or those a worker sent to this controller."""
        for name, value in report.user_properties:
            if name == ROWS_PROPERTY and report.when == "call" and isinstance(value, list):
                rows = [CheckRow.from_dict(row) for row in value]
                self.rows.run.extend(rows)
                if hasattr(report, "node"):  # from an xdist worker: first seen here, on the controller
                    for row in rows:
                        self.config.hook.pytest_convperf_row_recorded(
                            row=row, nodeid=report.nodeid, from_worker=True
                        )
            elif name == SECTIONS_PROPERTY and isinstance(value, list):
                self.sections.received.extend(Section(**s) for s in value)

    # ---- session end (baselines and reports; written by the controller only) ------------------
    @pytest.hookimpl(tryfirst=True)  # before xdist starts workers that would journal
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The environment's settings as the conftests left them; stop the run (``UsageError``) before
        any test when an output folder cannot be written."""
        # One config for the session and every convperf plugin (they read it through the stash).
        self.config.stash[CONFIG_KEY] = self.cfg.with_environment()
        if self.cfg.enabled and is_controller(self.config) and self.confirm_run is None:
            check_output_paths(self.cfg)
            if self.cfg.report_dir is not None:
                journal.start(self.cfg.report_dir)

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Stop the run (``UsageError``) before any test when a baseline file it reads is malformed.

        Only the files of the collected test modules in this machine's folders (real and fake) are
        read. Under xdist the controller does it (:meth:`pytest_xdist_node_collection_finished`): a
        worker that stops at collection takes its message down with it.
        """
        if not self.cfg.enabled or not is_controller(self.config):
            return
        items = [
            item
            for item in session.items
            if item.get_closest_marker("convperf") is not None
            or "convperf" in getattr(item, "fixturenames", ())
        ]
        refuse_shared_keys(item.nodeid for item in items)
        modules = {Path(str(item.path)).stem for item in items}
        if not modules:
            return
        try:
            stores = [self.store(), self.store(fake=True)]
        except pytest.UsageError:
            raise
        except Exception:  # no usable device: the checks themselves report it
            return
        validate_files(store.path(module) for store in stores for module in modules)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """The xdist controller's check of the files the run reads, once, from the first worker's ids.

        The controller never resolves the device (it would hold a CUDA context beside the workers),
        so it validates the collected modules' files of every machine folder: a few files, never
        a whole tree.
        """
        if not self.cfg.enabled or self.built.validated:
            return
        self.built.validated = True
        root = self.cfg.baselines_dir
        refuse_shared_keys(ids)
        modules = {Path(nodeid.split("::")[0]).stem for nodeid in ids}
        validate_files(path for module in sorted(modules) for path in root.glob(f"*/{module}.yaml"))

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The controller's session end, in order: report sections; the run's rows (with what a crashed
        worker journalled); ``pytest_convperf_modify_rows`` (fresh confirm, then any plugin's change,
        then the false-alarm control); the planned baseline updates; ``pytest_convperf_write_report``."""
        if self.end.finished or not is_controller(self.config) or self.confirm_run is not None:
            return  # a fresh-process confirm writes its measurements only (fresh_confirm.ConfirmRun)
        self.end.finished = True
        self._write_sections(session)
        if not self.cfg.enabled:
            return
        if self.end.ctrl_c:  # say what was kept (issue 24.4)
            self.end.interrupted = interrupted_note(len(self.rows.run), self.cfg.report_dir)
        self._fold_journal()
        rows = list(self.rows.run)
        for notes in self.config.hook.pytest_convperf_modify_rows(session=session, rows=rows):
            self.end.notes += notes or []
        self.rows.final = rows  # what the summary shows should the update stop the session
        self.rows.final = rows = self._apply_updates(session, rows)
        self._write_reports(session, rows)
        if self.cfg.report_dir is not None and rows:
            from pytest_convperf.night.history_gate import gate

            failing, self.end.history_lines = gate(self.cfg.report_dir, rows)
            if failing and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """pytest calls this before ``pytest_sessionfinish`` for a Ctrl-C, for ``pytest.exit()`` and for
        its own stops (``Session.Interrupted``, a KeyboardInterrupt: "N errors during collection",
        ``session.shouldstop``); only the first is a Ctrl-C."""
        value = excinfo.value
        own_stop = isinstance(value, pytest.Session.Interrupted)
        self.end.ctrl_c = isinstance(value, KeyboardInterrupt) and not own_stop

    def _write_sections(self, session: pytest.Session) -> None:
        if self.sections.received and self.cfg.report_dir is None:
            # No report folder: the summary names the sections and the option instead of paths into
            # a temporary folder nobody looks for (issue 38.8).
            self.sections.unwritten = sorted({s.name for s in self.sections.received})
        elif self.sections.received:
            try:
                self.sections.paths = write_sections(self.report_dir(), self.sections.received)
            except OSError as exc:  # a full disk: said, and the updates and reports are still tried
                self._not_written(session, "report sections", exc)

    def _fold_journal(self) -> None:
        """Rows of a worker that crashed after its check, from the journal (``--convperf-report``)."""
        if self.cfg.report_dir is not None:
            lost, notes = journal.lost_rows(
                self.cfg.report_dir, {(row.nodeid, row.key) for row in self.rows.run}
            )
            self.rows.run.extend(lost)
            self.end.notes += notes

    def _apply_updates(self, session: pytest.Session, rows: list[CheckRow]) -> list[CheckRow]:
        """The planned updates, cliff changes and orphans written; the rows marked with what was written."""
        from pytest_convperf.baselines.update_outcome import mark_written
        from pytest_convperf.baselines.updates import apply_updates

        cfg = self.cfg
        out_dir = cfg.report_dir if cfg.report_dir is not None else cfg.rootdir
        planned = self.config.hook.pytest_convperf_cliff_changes()
        cliffs = [change for changes in planned for change in changes]
        from pytest_convperf.baselines.orphans import PLUGIN_NAME, OrphanWatch

        watch = self.config.pluginmanager.get_plugin(PLUGIN_NAME)  # absent without --convperf, or left out
        orphans = watch.find(cfg.baselines_dir, rows) if isinstance(watch, OrphanWatch) else {}
        applied = apply_updates(cfg, rows, out_dir, cliffs, orphans)
        if applied is None:
            return rows
        # What was written, not only planned: the reports say "recorded" for these alone.
        self.end.update_md = applied.path if applied.recorded else None
        self.end.notes += [f"baseline update NOT written: {line}" for line in applied.failed]
        if applied.failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return mark_written(rows, applied)

    def night(self) -> Mapping[str, object]:
        """The session's false-alarm control (``NightControlDict``); empty without its plugin."""
        from pytest_convperf.night.decide import PLUGIN_NAME, FalseAlarmControl

        control = self.config.pluginmanager.get_plugin(PLUGIN_NAME)  # absent with -p no:convperf-false-alarms
        if isinstance(control, FalseAlarmControl) and control.control is not None:
            return control.control.to_dict()
        return {}

    def _write_reports(self, session: pytest.Session, rows: list[CheckRow]) -> None:
        from pytest_convperf.baselines.updates import commit_info

        cfg = self.cfg
        if not rows:
            return
        when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        about = {"machine_info": self.machine_info(rows), "commit_info": commit_info(cfg), "when": when}
        # The session's identity in its history records and the results store: ``when`` has whole
        # seconds, and two sessions' equal results in one second must stay two records.
        session_id = uuid.uuid4().hex
        try:
            for notes in self.config.hook.pytest_convperf_session_results(rows=rows, **about):
                self.end.notes += notes or []
        except OSError as exc:
            self._not_written(session, "the session's result files", exc)
        if cfg.report_dir is not None:
            try:
                for notes in self.config.hook.pytest_convperf_write_report(
                    rows=rows, report_dir=cfg.report_dir, night=self.night(), session_id=session_id, **about
                ):
                    self.end.notes += notes or []
            except OSError as exc:
                self._not_written(session, f"the reports in {cfg.report_dir}", exc)
        # The shared store last: the local files above never wait for it (issue 37.5).
        try:
            for notes in self.config.hook.pytest_convperf_store_results(
                rows=rows, session_id=session_id, **about
            ):
                self.end.notes += notes or []
        except OSError as exc:
            self._not_written(session, "the results store's pending records", exc)

    def _not_written(self, session: pytest.Session, what: str, exc: OSError) -> None:
        """A session-end write the disk refused: one note instead of a traceback, and the session fails."""
        self.end.notes.append(f"{what} NOT (all) written: {exc}")
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def machine_info(self, rows: Sequence[CheckRow]) -> dict[str, DeviceFact]:
        """pytest-benchmark's ``machine_info`` with the device facts (GPU name, clocks, versions)."""
        info: dict[str, DeviceFact] = {"machine": rows[0].machine if rows else None}
        try:
            device = self.device_info()
        except Exception as exc:  # the report must not fail because the device cannot be queried again
            info["device_error"] = str(exc)
            return info
        info.update(device="cuda" if device.is_cuda else "cpu", name=device.name, slug=device.slug)
        info.update(device.facts)  # scalars each (``DeviceFact``): JSON as they are
        return info

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Checks grouped by verdict with speedup, CI, baseline and delta; where report sections went."""
        if not is_controller(self.config):
            return
        for path in self.sections.paths:
            terminalreporter.write_line(f"convperf report section: {path}")
        if self.sections.unwritten:
            terminalreporter.write_line(
                f"convperf: report sections not written ({', '.join(self.sections.unwritten)}): "
                "--convperf-report=DIR writes them beside the report"
            )
        if not self.cfg.enabled:
            return
        rows = self.rows.shown()
        if self.end.interrupted:
            terminalreporter.write_line(self.end.interrupted, yellow=True)
        if not rows and not self.end.update_md:
            return
        from pytest_convperf.reports.report import counts, terminal_lines

        tr = terminalreporter
        heading = counts(rows)
        tr.write_sep("=", f"convperf: {heading}" if heading else "convperf")
        for line in terminal_lines(rows, verbose=self.config.get_verbosity()):
            tr.write_line(line)
        for lines in self.config.hook.pytest_convperf_summary_lines(rows=rows):
            for line in lines or []:
                tr.write_line(line)
        for line in self.end.history_lines:
            tr.write_line(line, red=line.startswith("convperf: the session FAILS"))
        if rows:  # the noise the next session's gate will use (tonight's sessions included)
            machine, kind = rows[0].machine or "unknown", rows[0].device_kind or "cpu"
            for line in noise_lines(self.cfg.report_dir, machine, kind):
                tr.write_line(line)
        if self.end.update_md is not None:
            tr.write_line(f"baseline update written for review: {self.end.update_md}")
        if self.cfg.report_dir is not None and rows:
            tr.write_line(f"convperf report: {self.cfg.report_dir}")
        for note in dict.fromkeys(self.end.notes):  # one line per fact: two writers may find the same one
            tr.write_line(f"note: {note}")


def machine_name(cfg: ConvperfConfig, detected: str, *, fake: bool) -> str:
    """The baseline folder's name: ``--convperf-machine``, its alias class or the ``detected`` slug,
    with ``-fake`` for the fake timer's numbers (:meth:`ConvperfSession.store`)."""
    machine = resolve_machine(detected, cfg.machine, cfg.machine_aliases)
    if fake and machine == resolve_machine(detected, None, cfg.machine_aliases):
        machine += FAKE_SUFFIX
    return machine


def machine_folder(config: pytest.Config, *, device: str | None = None) -> Path:
    """The baselines folder a session with ``config``'s options reads and writes
    (``<--convperf-baselines>/<machine>``), known before ``pytest_configure``; ``device`` (``cpu`` or
    ``cuda``) overrides ``--convperf-device``. The suite's CPU main job asks whether it exists."""
    from pytest_convperf.core.config import ConvperfConfig
    from pytest_convperf.core.device import resolve_device

    cfg = ConvperfConfig.from_pytest_config(config)
    detected = resolve_device(device or cfg.device, threads=cfg.cpu_threads).slug
    return cfg.baselines_dir / machine_name(cfg, detected, fake=cfg.fake)


SESSION_KEY = pytest.StashKey[ConvperfSession]()
