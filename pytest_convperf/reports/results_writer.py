"""The session's rows into the results store (``--convperf-store=URL``, ini ``convperf_store``), and
``python -m pytest_convperf store import DIR``.

``ResultsWriter`` is a pytest plugin the controller registers in ``pytest_configure``: its
``pytest_sessionstart`` connects and migrates (an unreachable store stops the session there, with
the URL and the fix, never after the night was measured), its ``pytest_convperf_write_report``
appends the session's records in one transaction at the end. A write that fails then keeps the
records in ``<report dir>/store.pending.jsonl`` and says so; the next session's write (or
``store import``) stores them. With no URL the store is ``<report dir>/convperf.sqlite`` (the
folder ``history.jsonl`` lives in); without SQLAlchemy that default store is off and the header
says so in one line (the GPU machine installs with ``--no-deps``), while an explicit URL needs it.
See docs/results-store.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_convperf.core.jsonl import Skipped, end_cut_line, read_objects, summary
from pytest_convperf.core.kerneldiff import KernelShare
from pytest_convperf.reports.report_files import HistoryRecord, history_records

if TYPE_CHECKING:
    import sqlalchemy as sa

    from pytest_convperf.core.config import ConvperfConfig
    from pytest_convperf.judge.check_row import CheckRow
    from pytest_convperf.resultsdb.db import Refused

DEFAULT_FILE = "convperf.sqlite"
PENDING = "store.pending.jsonl"
PLUGIN_NAME = "convperf-results-store"
# Without --convperf-report the store's folder: beside pytest's own .pytest_cache, in the rootdir.
HOME = ".convperf"
_GITIGNORE = "# created by pytest-convperf: the local results store, never committed\n*\n"
# SQLAlchemy is a dependency; an install with --no-deps (the GPU machine's) lacks it.
INSTALL_HINT = "pip install SQLAlchemy, or install pytest-convperf with its dependencies"
PG_INSTALL_HINT = "pip install 'pytest-convperf[store]'"
# ``--convperf-store=off``: no store (a read-only checkout, or a run that must leave nothing behind).
OFF = "off"


def have_sqlalchemy() -> bool:
    """Whether SQLAlchemy imports (an install with ``--no-deps``, as on the GPU machine, lacks it)."""
    try:
        import sqlalchemy  # noqa: F401
    except ImportError:
        return False
    return True


def _have_psycopg() -> bool:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return True


def configure(config: pytest.Config, cfg: ConvperfConfig, *, confirm_run: bool) -> None:
    """Register the writer on the controller of a ``--convperf`` session (not with ``--convperf-store=off``).

    The store's folder (its SQLite file by default, and the records a failed write keeps) is the
    report folder, or without ``--convperf-report`` ``<rootdir>/.convperf/`` (git-ignored by its own
    ``.gitignore``, as ``.pytest_cache`` is): the project's own results, kept between sessions.
    """
    if not cfg.enabled or confirm_run or hasattr(config, "workerinput"):
        return
    url = cfg.store_url or ""
    if url.lower() == OFF:
        return
    if url and not have_sqlalchemy():
        raise pytest.UsageError(
            f"--convperf-store={url} needs SQLAlchemy, which is not installed: {INSTALL_HINT} "
            "(or drop --convperf-store)"
        )
    if url.startswith("postgres") and not _have_psycopg():
        raise pytest.UsageError(
            f"--convperf-store={url} needs psycopg (PostgreSQL's driver), which is not installed: "
            f"{PG_INSTALL_HINT}"
        )
    home = cfg.report_dir if cfg.report_dir is not None else cfg.rootdir / HOME
    default = f"sqlite:///{(home / DEFAULT_FILE).resolve()}"
    config.pluginmanager.register(
        ResultsWriter(url or default, home, explicit=bool(url), own_home=cfg.report_dir is None), PLUGIN_NAME
    )


class ResultsWriter:
    """The controller's side of the store: check at session start, one write at session end."""

    def __init__(self, url: str, report_dir: Path, *, explicit: bool, own_home: bool = False) -> None:
        self.url = url
        self.report_dir = report_dir  # the report folder, or .convperf/ (own_home)
        self.explicit = explicit
        self.own_home = own_home
        self.off = None if have_sqlalchemy() else "SQLAlchemy is not installed"
        self.engine: sa.Engine | None = None
        self.versions = (0, 0)

    def home(self) -> Path:
        """The store's folder, made on first use; ``.convperf/`` with its ``.gitignore``."""
        self.report_dir.mkdir(parents=True, exist_ok=True)
        ignore = self.report_dir / ".gitignore"
        if self.own_home and not ignore.exists():
            ignore.write_text(_GITIGNORE, encoding="utf-8")
        return self.report_dir

    def pytest_report_header(self) -> list[str]:
        if self.off:  # resultsdb imports SQLAlchemy: not here
            hint = f": {INSTALL_HINT}" if not have_sqlalchemy() else ""
            rest = "" if self.own_home else "; history.jsonl as before"
            return [f"convperf: results store off ({self.off}{hint}){rest}"]
        from pytest_convperf.resultsdb.db import shown

        before, after = self.versions
        migrated = f", migrated from schema v{before}" if before and before != after else ""
        return [f"convperf: results store {shown(self.url)} (schema v{after}{migrated})"]

    @pytest.hookimpl(trylast=True)  # after the session has checked and made the report folder
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.off:
            return
        from pytest_convperf.core.files import unwritable
        from pytest_convperf.resultsdb.db import StoreUnavailable, open_store

        if not self.explicit:
            why = unwritable(self.report_dir)
            if why is not None and self.own_home:  # a default nobody asked for: off, said once
                self.off = f"{self.report_dir}: {why}; --convperf-store=URL or --convperf-report=DIR"
                return
            self.home()
        try:
            self.engine, self.versions = open_store(self.url)
        except StoreUnavailable as exc:
            raise pytest.UsageError(str(exc)) from None

    def pytest_unconfigure(self) -> None:
        if self.engine is not None:
            self.engine.dispose()

    def pytest_convperf_store_results(
        self,
        rows: Sequence[CheckRow],
        machine_info: Mapping[str, Any],
        commit_info: Mapping[str, Any],
        when: str,
        session_id: str,
    ) -> list[str]:
        if self.engine is None:
            return []
        commit = commit_info.get("id")
        records = store_records(
            rows,
            when=when,
            commit=str(commit) if commit else None,
            code=commit_info.get("code"),
            device=machine_info.get("name"),
            session_id=session_id,
        )
        notes = self.write(records, session_id)
        if self.explicit and not any(" NOT written " in n for n in notes):
            notes += self.change_points(records)
        return notes

    def change_points(self, records: Sequence[Mapping[str, Any]]) -> list[str]:
        """A store given by URL holds more nights than the report folder (an ephemeral runner's
        history.jsonl may hold tonight only): its change points new tonight on this session's
        machines, less those the report's history.jsonl gives too (the built-in report's notes,
        searched over the same last ``WINDOW`` runs of each check: the whole file grows each night)."""
        from pytest_convperf.night.history import (
            new_store_change_points,
            recent_change_points,
            record_problem,
            series_from_records,
        )

        try:
            found = new_store_change_points(self.url, {str(r.get("machine") or "unknown") for r in records})
            objects, _ = read_objects(self.report_dir / "history.jsonl")
            here: list[Mapping[str, Any]] = [rec for _, rec in objects if record_problem(rec) is None]
            # Tonight's records, unless the built-in report (which runs first) appended them already.
            written = {rec["session_id"] for rec in here if rec.get("session_id")}
            here += [rec for rec in records if not rec.get("session_id") or rec["session_id"] not in written]
            known = {(c.machine, c.key) for c in recent_change_points(series_from_records(here)) if c.new}
        except ImportError as exc:  # ruptures missing: the report's own note, word for word (said once)
            return [f"change points not computed: {exc}"]
        except Exception as exc:  # never costs the night's reports
            return [f"results store: change points not computed: {type(exc).__name__}: {exc}"]
        return [
            f"change point new in this run (results store): {c.line()}"
            for c in found
            if (c.machine, c.key) not in known
        ]

    def write(self, records: Sequence[Mapping[str, object]], session_id: str) -> list[str]:
        """Tonight's records in one transaction, then any a failed write left; a write that fails
        keeps its records in the pending file, and one note says where. A record the store refuses
        (a key over its bound, a value the engine refuses) is named in a note and not kept: it
        would fail every later night too, and its line is in history.jsonl."""
        from pytest_convperf.resultsdb.db import write

        assert self.engine is not None
        pending = self.report_dir / PENDING
        left, skipped = read_objects(pending) if pending.exists() else ([], [])
        notes = [f"{PENDING}: {line}" for line in summary(skipped)]
        try:
            done = write(self.engine, records, source=str(self.report_dir), session_id=session_id)
        except Exception as exc:
            self.home()
            end_cut_line(pending)
            with open(pending, "a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(rec, default=str, sort_keys=True) + "\n" for rec in records)
            return [*notes, self._not_written(exc, len(records) + len(left), pending)]
        notes += self._refused(done.refused)
        if left:
            try:
                done = write(self.engine, [rec for _, rec in left], source=str(pending))
            except Exception as exc:
                return [*notes, self._not_written(exc, len(left), pending)]
            pending.unlink()
            notes.append(f"results store: {len(left)} record(s) a failed write had left in {pending} stored")
            notes += self._refused(done.refused)
        return notes

    def _refused(self, refused: Sequence[Refused]) -> list[str]:
        from pytest_convperf.resultsdb.db import shown

        return [
            f"results store {shown(self.url)} refused one record, the others stored: {r.line()}"
            for r in refused
        ]

    def _not_written(self, exc: Exception, kept: int, pending: Path) -> str:
        from pytest_convperf.resultsdb.db import failure, shown

        return (
            f"results store {shown(self.url)} NOT written ({failure(exc)}); {kept} record(s) "
            f"kept in {pending}: the next session stores them, or python -m pytest_convperf store import "
            f"{self.report_dir} --store URL"
        )


class StoreRecord(HistoryRecord):
    """A history record with what the store adds (:func:`store_records`)."""

    ratio_ci: list[float] | None
    noise: float | None
    kernels: list[KernelShare] | None
    nodeid: str
    phase: str
    problem: str
    device: object


def store_records(
    rows: Sequence[CheckRow],
    *,
    when: str,
    commit: str | None,
    code: str | None,
    device: Any = None,
    session_id: str | None = None,
) -> list[StoreRecord]:
    """``history.jsonl``'s records with what the store adds: the ratio's CI, the entry's noise, the
    candidate's kernel table, node id, phase, problem and the device's name."""
    from pytest_convperf.reports.report_row import final_comparison

    out = []
    records = history_records(rows, when=when, commit=commit, code=code, session_id=session_id)
    for row, rec in zip(rows, records):
        comp = final_comparison(row)
        facts = comp.facts if comp is not None else {}
        kernels = facts.get("kernels") or (row.comparison.facts.get("kernels") if row.comparison else None)
        out.append(
            StoreRecord(
                **rec,
                ratio_ci=list(comp.time_ratio_ci) if comp is not None else None,
                noise=row.baseline.noise if row.baseline is not None else None,
                kernels=kernels,
                nodeid=row.nodeid,
                phase=row.phase,
                problem=row.problem,
                device=device,
            )
        )
    return out


def import_dir(url: str, directory: Path) -> tuple[list[str], int]:
    """``store import DIR``: every ``history.jsonl`` (and ``store.pending.jsonl``) under DIR into the
    store; a record already there (same digest) is not added again; unusable lines are named."""
    from pytest_convperf.night.history import read_history_records
    from pytest_convperf.resultsdb.db import StoreUnavailable, failure, fix_for, open_store, shown, write

    files = (
        sorted([*directory.rglob("history.jsonl"), *directory.rglob(PENDING)]) if directory.is_dir() else []
    )
    if not files:
        return [f"store import: no history.jsonl under {directory}; give a --convperf-report folder"], 2
    try:
        engine, _ = open_store(url)
    except StoreUnavailable as exc:
        return [f"store import: {exc}"], 2
    lines: list[str] = []
    total = new = refused = 0
    try:
        for file in files:
            good, skipped = read_history_records(file)
            done = write(engine, good, source=str(file))
            total, new, refused = total + len(good), new + done.new, refused + len(done.refused)
            skipped.sort(key=_line)
            lines += [f"store import: {line}" for line in summary(skipped)]
            lines += [f"store import: {file}: refused {r.line()}" for r in done.refused]
            lines.append(f"store import: {file}: {len(good)} records, {done.new} new")
    except Exception as exc:  # the store itself failed (connection, lock, disk): one line, not a traceback
        lines.append(
            f"store import: results store {shown(url)} NOT written ({failure(exc)}); {fix_for(url, exc)}"
        )
        return lines, 1
    finally:
        engine.dispose()
    lines.append(
        f"store import: {new} of {total} records new in {shown(url)}"
        + (f"; {refused} refused (named above), the others stored" if refused else "")
    )
    return lines, 1 if refused else 0


def _line(skipped: Skipped) -> int:
    return skipped.line
