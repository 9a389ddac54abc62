"""Hooks a conftest or plugin may implement to extend convperf (registered by ``pytest_addhooks``).

The core calls these; convperf's optional features implement them as plugin objects registered in
``plugin.pytest_configure`` (``config.pluginmanager.register(obj, name)``, as pytest-xdist registers
its ``DSession``), so each can be left out with ``-p no:<name>``:

==========================  ==================================  ========================================
plugin name                 object                              hooks it implements
==========================  ==================================  ========================================
``convperf-ab``             ``ab.ab_plugin.ABSession``          ``check_timed``, ``modify_rows``,
                            (only with ``--convperf-against``)  ``write_report`` (wrapper)
``convperf-ab-hint``        ``ab.ab_plugin.GateHint``           ``summary_lines``
                            (only without ``--convperf-against``)
``convperf-fresh-confirm``  ``night.fresh_confirm.FreshConfirm``  ``modify_rows`` (tryfirst)
``convperf-false-alarms``   ``night.decide.FalseAlarmControl``  ``modify_rows`` (trylast),
                                                                ``summary_lines``
``convperf-progress``       ``reports.progress.ProgressPlugin``  ``row_recorded``
``convperf-cliffs``         ``check.cliff_search.CliffPins``    ``cliff_changes`` (and pytest's report
                                                                hooks, which carry them to the controller)
``convperf-results-store``  ``reports.results_writer.``          ``store_results`` (and pytest's
                            ``ResultsWriter``                   ``sessionstart``: connect, migrate)
==========================  ==================================  ========================================

Process: under pytest-xdist a check runs in a worker and its row reaches the controller on the
test's report. ``pytest_convperf_check_timed`` runs where the check runs (a worker under xdist);
every other hook runs on the controller only (the only process in a run without xdist).

Arguments are passed by keyword (pluggy): an implementation takes any subset of them, and a new
argument can be added without breaking implementations that do not name it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_convperf.check.context import CheckContext
    from pytest_convperf.check.fixture import ConvperfFixture
    from pytest_convperf.core.results import Comparison
    from pytest_convperf.judge.check_row import CheckRow
    from pytest_convperf.judge.cliffs import CliffChange


@pytest.hookspec
def pytest_convperf_check_timed(
    convperf: ConvperfFixture, context: CheckContext, comparison: Comparison
) -> Mapping[str, Any] | None:
    """A check's first measurement is done: add facts to its row (return ``{name: value}``) or None.

    Called once per ``convperf.check``, in the process that runs the check (an xdist worker under
    xdist), after the first measurement, the integrity check and the kernel table, before the
    judgement (and its confirm measurement). ``comparison`` is the candidate against the reference;
    ``context`` is the check's frozen context (candidate, reference, problem, phase, mode, seed and its
    one input set: timing the same inputs keeps a paired comparison fair);
    ``convperf`` is the fixture (its ``timer``, ``device``, ``measure``, ``progress``). Every
    implementation runs; their returned mappings are merged into the row's ``facts`` in call order.
    The A/B (``--convperf-against``) is one: it returns ``{"ab": ...}``. An implementation may fail
    the test (``pytest.fail``); it never changes the verdict.
    """


@pytest.hookspec
def pytest_convperf_row_recorded(row: CheckRow, nodeid: str, from_worker: bool) -> None:
    """One check's row, final for this check (verdict judged), as the controller first sees it.

    Called once per row on the controller only: in a run without xdist when the check records it
    (during the test, before its report); under xdist when the worker's report brings it
    (``from_worker=True``: after pytest's status letter for the test). The session's own decisions
    at its end (fresh confirm, false-alarm control) come later, through
    :func:`pytest_convperf_modify_rows`. The live progress line implements it.
    """


@pytest.hookspec
def pytest_convperf_modify_rows(session: pytest.Session, rows: list[CheckRow]) -> list[str] | None:
    """At session end, change the run's rows in place (``rows[i] = dataclasses.replace(...)``);
    return notes for the terminal summary, or None.

    Called once, on the controller, in ``pytest_sessionfinish``, with every row of the run (a
    crashed worker's rows folded in from the journal), before the baseline updates and the reports,
    which then see the rows as modified. Like ``pytest_collection_modifyitems``: every
    implementation runs, in pluggy's order, each on the rows as the one before left them. The order
    is part of the contract: the fresh-process confirm of speed FAILs is ``tryfirst`` (it measures
    again, so what follows sees confirmed verdicts), the session's false-alarm control is
    ``trylast`` (it decides the family of FAILs, so it must see every other change); an
    implementation with neither runs between them. ``session.exitstatus`` may be raised (the
    false-alarm control fails the session on a kept FAIL). Not called without ``--convperf``.
    """


@pytest.hookspec
def pytest_convperf_cliff_changes() -> Sequence[CliffChange] | None:
    """The run's planned cliff pins and retirements, for the baseline update (controller only).

    Called once at session end, after :func:`pytest_convperf_modify_rows`, when the planned updates
    are written (``updates.apply_updates``); the changes of every implementation are applied.
    """


@pytest.hookspec
def pytest_convperf_summary_lines(rows: Sequence[CheckRow]) -> list[str] | None:
    """Lines for convperf's terminal summary, printed after the per-check lines (controller only).

    ``rows`` are the final rows (after :func:`pytest_convperf_modify_rows` and the updates). The
    false-alarm control prints its expectation and the FAILs it kept or cleared here.
    """


@pytest.hookspec
def pytest_convperf_session_results(
    rows: Sequence[CheckRow],
    machine_info: Mapping[str, Any],
    commit_info: Mapping[str, Any],
    when: str,
) -> list[str] | None:
    """The session's final rows with its machine and commit, for files that do not need a report
    folder (``--convperf-json=FILE``); return notes.

    Called once, on the controller, at session end, with or without ``--convperf-report``, after the
    rows are final (fresh confirm, false-alarm control) and before ``pytest_convperf_write_report``.
    """


@pytest.hookspec
def pytest_convperf_store_results(
    rows: Sequence[CheckRow],
    machine_info: Mapping[str, Any],
    commit_info: Mapping[str, Any],
    when: str,
    session_id: str,
) -> list[str] | None:
    """The session's final rows into a store shared beyond this run (the results store,
    ``reports/results_writer.py``); return notes.

    Called once, on the controller, at session end, with or without ``--convperf-report``, after
    every local file (``session_results``, ``write_report``): a store that is locked or slow never
    keeps the local reports waiting, and a kill in that wait leaves them written (issue 37.5).
    ``session_id`` is the one the history records carry.
    """


@pytest.hookspec
def pytest_convperf_write_report(
    rows: Sequence[CheckRow],
    report_dir: Path,
    machine_info: Mapping[str, Any],
    commit_info: Mapping[str, Any],
    when: str,
    night: Mapping[str, Any],
    session_id: str,
) -> list[str] | None:
    """Write the session's report files into ``report_dir`` (``--convperf-report``); return notes.

    Called once, on the controller, at session end, with every check's row (a ``check_row.CheckRow``;
    ``row.to_dict()`` is the JSON-able form that rows.json holds). Every implementation runs; the
    built-in one (``plugin.py``) writes report.md, results.json, rows.json, history.jsonl and
    speedup.png. An implementation may take any subset of the arguments (``rows`` and
    ``report_dir`` are enough for most). ``night`` is the session's false-alarm control
    (``multiplicity.NightControl.to_dict()``: method, level, family size, kept and cleared FAILs,
    adjusted p-values, ``summary``; empty when ``convperf-false-alarms`` is not registered); the rows
    already carry its decision (a cleared FAIL's verdict is ``SUSPECT``). ``session_id`` is the
    session's identity (a uuid), which its ``history.jsonl`` records and results-store rows carry.
    """
