"""ConvperfSession: the stores, typed rows across the xdist boundary, report sections."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_convperf.core.config import CONFIG_KEY, ConvperfConfig
from pytest_convperf.core.results import ErrorStats, Verdict
from pytest_convperf.judge.check_row import ROWS_PROPERTY, CheckRow
from pytest_convperf.judge.outcome import Decision
from pytest_convperf.reports.sections import SECTIONS_PROPERTY, ReportSections, Section, write_sections
from pytest_convperf.session import ConvperfSession
from tests.unit.judge.test_verdict import comparison


class NoHooks(SimpleNamespace):
    """``config.hook`` of a session no plugin implements convperf's hooks for: each returns no results."""

    def __getattr__(self, name: str) -> Any:
        return lambda **kwargs: []


def _session(tmp_path: Path, machine: str | None = None) -> ConvperfSession:
    cfg = ConvperfConfig(enabled=True, baselines_dir=tmp_path / "bl", machine=machine, report_dir=tmp_path)
    # No terminal reporter: the live progress line is off (pytest_convperf.reports.progress).
    plugins = SimpleNamespace(get_plugin=lambda name: None, has_plugin=lambda name: False)
    config = SimpleNamespace(
        pluginmanager=plugins, get_verbosity=lambda: 0, hook=NoHooks(), stash={CONFIG_KEY: cfg}
    )
    session = ConvperfSession(config)  # type: ignore[arg-type]
    session.built.device = SimpleNamespace(slug="amd-epyc-1t")  # type: ignore[assignment]
    return session


def _row() -> CheckRow:
    err = ErrorStats("output", 1e-6, 1e-5, 1e-7, 1e-5, 1e-4, (0, 1), 1.0, 1.0, 0, 0, 16)
    return CheckRow(
        key="test_k@p",
        nodeid="t.py::test_k",
        module="t",
        problem="p",
        phase="forward",
        comparison=comparison(0.5),
        errors=(err,),
        verdict=Verdict.PASS,
        message="ok",
        facts={"seed": 1},
        extra_metrics={"rel_l2": 0.01},
        machine="box",
        baselines_file="bl/box/t.yaml",
        device_kind="cpu",
        env={"torch": "2"},
        decision=Decision(Verdict.PASS, "pass", ""),
    )


def test_fake_timed_checks_get_their_own_store(tmp_path: Path) -> None:
    session = _session(tmp_path)
    assert session.store().machine == "amd-epyc-1t"
    assert session.store(fake=True).machine == "amd-epyc-1t-fake"
    assert session.store() is session.store()
    assert _session(tmp_path, machine="testbox").store(fake=True).machine == "testbox"


def test_a_row_crosses_the_xdist_boundary_unchanged(tmp_path: Path) -> None:
    worker, controller = _session(tmp_path), _session(tmp_path)
    row = _row()
    worker.record(row.nodeid, row)
    item: Any = SimpleNamespace(nodeid=row.nodeid, user_properties=[])
    report: Any = SimpleNamespace(user_properties=[], when="call")
    worker.attach_rows(item, report)
    # What xdist sends is JSON.
    report.user_properties = json.loads(json.dumps(report.user_properties))
    assert report.user_properties[0][0] == ROWS_PROPERTY
    controller.pytest_runtest_logreport(report)
    assert controller.rows.run == [row]
    assert any(name.startswith("convperf[test_k@p]") for name, _ in item.user_properties)


def test_sections_ride_on_the_next_report_and_are_written_once(tmp_path: Path) -> None:
    worker, controller = _session(tmp_path), _session(tmp_path)
    worker.sections.own.section("t.md", "| a |", title="Title")
    report: Any = SimpleNamespace(user_properties=[], when="teardown")
    worker.attach_sections(report)
    assert report.user_properties[0][0] == SECTIONS_PROPERTY and worker.sections.own.pending == []
    controller.pytest_runtest_logreport(report)
    controller.sections.received.append(Section("t.md", "| b |", "Title"))  # from another worker
    (path,) = write_sections(tmp_path, controller.sections.received)
    assert path.read_text() == "# Title\n\n| a |\n\n| b |\n"


def test_a_section_name_must_be_a_file_name() -> None:
    with pytest.raises(ValueError, match="plain file name"):
        ReportSections().section("../x.md", "text")


@pytest.mark.parametrize("enabled", [False, True])
def test_a_run_without_report_folder_or_sections_leaves_no_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    cfg = ConvperfConfig(enabled=enabled, baselines_dir=tmp_path / "bl", report_dir=None, rootdir=tmp_path)
    plugins = SimpleNamespace(get_plugin=lambda name: None, has_plugin=lambda name: False)
    config = SimpleNamespace(
        pluginmanager=plugins,
        get_verbosity=lambda: 0,
        getoption=lambda *a, **k: None,
        hook=NoHooks(),
        stash={CONFIG_KEY: cfg},
    )
    session = ConvperfSession(config)  # type: ignore[arg-type]
    session.pytest_sessionfinish(SimpleNamespace(exitstatus=pytest.ExitCode.OK))  # type: ignore[arg-type]
    assert list(tmp.iterdir()) == []


def test_a_full_disk_at_session_end_is_a_note_and_a_failed_session_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    def full(**kwargs: object) -> list[list[str]]:
        raise OSError(errno.ENOSPC, "No space left on device")

    session = _session(tmp_path)
    session.config.getoption = lambda *a, **k: None
    session.config.hook.pytest_convperf_write_report = full
    monkeypatch.setattr(session, "machine_info", lambda rows: {})
    session.sections.received.append(Section("t.md", "| a |", None))
    monkeypatch.setattr("pytest_convperf.session.write_sections", lambda *a: full())
    session.rows.run.append(_row())
    pytest_session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    session.pytest_sessionfinish(pytest_session)  # type: ignore[arg-type]
    assert pytest_session.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert session.end.notes[0] == "report sections NOT (all) written: [Errno 28] No space left on device"
    assert session.end.notes[-1].startswith(f"the reports in {tmp_path} NOT (all) written: [Errno 28]")
