"""Sessions and the results store (issue 27.1-2): the default store in the report folder, an
unreachable store stops the session before any test, a write refused at the end keeps the rows in
the report folder and the next session stores them, ``store import`` and ``history URL``."""

from __future__ import annotations

import datetime as _dt
import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

import pytest_convperf.session as session_module
from pytest_convperf.__main__ import main
from pytest_convperf.reports.results_writer import have_sqlalchemy
from tests.integration._lifecycle import REPO, Suite

# Every test but the one about its absence (which runs with or without it).
needs_store = pytest.mark.skipif(
    not have_sqlalchemy(), reason="the results store needs SQLAlchemy: pip install '.[store]'"
)


# The sessions run in this process (pytester's runpytest): fast once the plugin's modules are
# loaded, so two of them often end in the same second, which is how a store once lost a session's
# rows (equal records; see test_two_sessions_in_one_second_both_reach_the_store).
@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]) -> Suite:
    return Suite(pytester, monkeypatch, plugin_args)


def _stored(db: Path) -> list[tuple[str, str, float]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute('SELECT key, verdict, time_ratio FROM convperf_results ORDER BY "when", id'))


@needs_store
def test_a_session_appends_its_rows_to_the_default_store(suite: Suite) -> None:
    result = suite.run("--convperf-report=report")
    result.assert_outcomes(passed=2)
    db = suite.pytester.path / "report" / "convperf.sqlite"
    result.stdout.fnmatch_lines([f"convperf: results store sqlite:///{db} (schema v2)"])
    rows = _stored(db)
    assert [(k.split("[")[0], v, r) for k, v, r in rows] == [("test_a", "NEW", 0.5), ("test_b", "NEW", 0.5)]
    with sqlite3.connect(db) as conn:
        (record,) = conn.execute("SELECT record FROM convperf_results LIMIT 1").fetchone()
    data = json.loads(record)
    assert data["ratio_ci"] == [0.5, 0.5] and data["nodeid"].startswith("test_suite.py::test_a")
    suite.run("--convperf-report=report").assert_outcomes(passed=2)
    assert len(_stored(db)) == 4  # appended, one run per session


class _SameSecond(_dt.datetime):
    """The session's clock stopped at one second: every session ends "at the same time"."""

    @classmethod
    def now(cls, tz: _dt.tzinfo | None = None) -> _SameSecond:
        return cls(2026, 3, 1, 2, 0, 0, tzinfo=tz)


@needs_store
def test_two_sessions_in_one_second_both_reach_the_store(
    suite: Suite, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Same machine, commit, ratios and second: the records differ only by their session. Before
    # each record carried its session_id, the store kept the first session's rows only, and
    # store import merged the two sessions' history lines into one.
    monkeypatch.setattr(session_module, "_dt", SimpleNamespace(datetime=_SameSecond, timezone=_dt.timezone))
    for _ in range(2):
        suite.run("--convperf-report=report").assert_outcomes(passed=2)
    report = suite.pytester.path / "report"
    assert len(_stored(report / "convperf.sqlite")) == 4
    history = [json.loads(line) for line in (report / "history.jsonl").read_text().splitlines()]
    assert {rec["when"] for rec in history} == {"2026-03-01T02:00:00+00:00"}
    assert len({rec["session_id"] for rec in history}) == 2
    url = f"sqlite:///{suite.pytester.path / 'imported.sqlite'}"
    capsys.readouterr()
    assert main(["store", "import", str(report), "--store", url]) == 0
    assert "store import: 4 of 4 records new" in capsys.readouterr().out


@needs_store
def test_an_unreachable_store_stops_the_session_before_any_test(suite: Suite, tmp_path: Path) -> None:
    url = f"postgresql://runner:pw@/convperf?host={tmp_path}"
    result = suite.run("--convperf-report=report", f"--convperf-store={url}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: results store postgresql://runner:***@/convperf?host={tmp_path} cannot be used "
            "(*start the database*"
        ]
    )
    assert "passed" not in result.stdout.str()
    assert not (suite.pytester.path / "report" / "rows.journal.jsonl").exists()  # nothing was measured


@needs_store
def test_a_store_needs_the_report_folder(suite: Suite, tmp_path: Path) -> None:
    result = suite.run(f"--convperf-store=sqlite:///{tmp_path / 's.sqlite'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --convperf-store=sqlite:///* needs --convperf-report=DIR*"])


# The end write fails: the session's last hook (after the store was checked at the start) hides
# the results table, as a lost connection or a full disk would make the INSERT fail.
BREAK_AT_END = """
import sqlite3

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    with sqlite3.connect("store.sqlite") as conn:
        conn.execute("ALTER TABLE convperf_results RENAME TO hidden")
"""


@needs_store
def test_a_refused_end_write_keeps_the_rows_and_the_next_session_stores_them(suite: Suite) -> None:
    db = suite.pytester.path / "store.sqlite"
    store = f"--convperf-store=sqlite:///{db}"
    suite.pytester.makeconftest(BREAK_AT_END)
    result = suite.run("--convperf-report=report", store)
    result.assert_outcomes(passed=2)
    pending = suite.pytester.path / "report" / "store.pending.jsonl"
    result.stdout.fnmatch_lines(
        [
            f"note: results store sqlite:///{db} NOT written (OperationalError: no such table*"
            f"2 record(s) kept in {pending}*"
        ]
    )
    assert len(pending.read_text().splitlines()) == 2
    (suite.pytester.path / "conftest.py").unlink()
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE hidden RENAME TO convperf_results")
    result = suite.run("--convperf-report=report", store)
    result.stdout.fnmatch_lines(
        [f"note: results store: 2 record(s) a failed write had left in {pending} stored"]
    )
    assert len(_stored(db)) == 4 and not pending.exists()


@needs_store
def test_store_import_and_history_from_the_store(suite: Suite, capsys: pytest.CaptureFixture[str]) -> None:
    report = suite.pytester.path / "report"
    for ratio in (0.5, 0.5, 0.5, 0.6, 0.6, 0.6):  # a 20 % step at the 4th run, persisted 3 runs
        suite.set_ratio(ratio)
        suite.run("--convperf-report=report")
    (report / "convperf.sqlite").unlink()  # the store from history.jsonl alone
    url = f"sqlite:///{suite.pytester.path / 'imported.sqlite'}"
    assert main(["store", "import", str(report), "--store", url]) == 0
    assert "store import: 12 of 12 records new" in capsys.readouterr().out
    assert main(["store", "import", str(report), "--store", url]) == 0
    assert "store import: 0 of 12 records new" in capsys.readouterr().out
    assert main(["history", url, "--no-plot"]) == 0
    from_store = capsys.readouterr().out
    assert main(["history", str(report), "--no-plot"]) == 0
    from_file = capsys.readouterr().out
    assert from_store == from_file and from_store.count("step +20.0 %") == 2, from_store


def test_without_sqlalchemy_the_default_store_is_off_and_says_so(
    suite: Suite, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The GPU machine installs the plugin with --no-deps: no SQLAlchemy. A package of that name
    # that fails to import stands in for it (the subprocess sees it first on PYTHONPATH).
    fake = tmp_path / "no-sqlalchemy" / "sqlalchemy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("No module named sqlalchemy")\n')
    monkeypatch.setenv("PYTHONPATH", f"{fake.parent}:{REPO}")
    args = ("--convperf", "--convperf-machine=testbox", "--convperf-device=cpu", "-p", "no:cacheprovider")
    result = suite.pytester.runpytest_subprocess(*suite.plugin_args, *args, "--convperf-report=report")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "convperf: results store off (SQLAlchemy is not installed: pip install 'pytest-convperf[store]');"
            " history.jsonl as before"
        ]
    )
    report = suite.pytester.path / "report"
    assert len((report / "history.jsonl").read_text().splitlines()) == 2
    assert not (report / "convperf.sqlite").exists()
    url = f"--convperf-store=sqlite:///{tmp_path / 's.sqlite'}"
    result = suite.pytester.runpytest_subprocess(*suite.plugin_args, *args, "--convperf-report=report", url)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --convperf-store=sqlite:///* needs SQLAlchemy, which is not installed*"]
    )


@needs_store
def test_convperf_json_writes_the_results_file_where_asked(suite: Suite) -> None:
    suite.run("--convperf-report=report", "--convperf-json=out/results.json").assert_outcomes(passed=2)
    ours = json.loads((suite.pytester.path / "out" / "results.json").read_text())
    assert ours == json.loads((suite.pytester.path / "report" / "results.json").read_text())
    assert len(ours["benchmarks"]) == 4  # candidate and reference of 2 checks, pytest-benchmark's schema
    # Alone, like --benchmark-json: no report folder needed.
    suite.run("--convperf-json=alone.json").assert_outcomes(passed=2)
    alone = json.loads((suite.pytester.path / "alone.json").read_text())
    assert len(alone["benchmarks"]) == 4 and not (suite.pytester.path / "report2").exists()


@needs_store
@pytest.mark.parametrize("ephemeral", [True, False])
def test_the_nights_change_points_from_the_store_once(suite: Suite, ephemeral: bool) -> None:
    # Ephemeral: each night in a fresh report folder (a runner that keeps nothing), one store for
    # all: history.jsonl holds tonight alone, the store every night, and the step is found there.
    # Kept: the report's history.jsonl has the step too; its note is not repeated from the store.
    store = f"--convperf-store=sqlite:///{suite.pytester.path / 'team.sqlite'}"
    for night, ratio in enumerate((0.5, 0.5, 0.5, 0.6, 0.6, 0.6)):
        suite.set_ratio(ratio)
        result = suite.run(f"--convperf-report=night{night if ephemeral else ''}", store)
    out = result.stdout.str()
    from_store = out.count("note: change point new in this run (results store): test_")
    from_file = out.count("note: change point new in this run: test_")
    assert (from_store, from_file) == ((2, 0) if ephemeral else (0, 2)), out
    assert "step +20.0 %" in out
