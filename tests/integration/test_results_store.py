"""Sessions and the results store (issue 27.1-2): the default store in the report folder, an
unreachable store stops the session before any test, a write refused at the end keeps the rows in
the report folder and the next session stores them, ``store import`` and ``history URL``."""

from __future__ import annotations

import datetime as _dt
import json
import os
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

import pytest_convperf.session as session_module
from pytest_convperf.__main__ import main
from pytest_convperf.reports.results_writer import have_sqlalchemy
from tests.integration._lifecycle import MACHINE, REPO, Suite

# Every test but the one about its absence (which runs with or without it).
needs_store = pytest.mark.skipif(
    not have_sqlalchemy(),
    reason="the store needs SQLAlchemy (absent after pip install --no-deps): pip install SQLAlchemy",
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
    from pytest_convperf.resultsdb import schema

    result = suite.run("--convperf-report=report")
    result.assert_outcomes(passed=2)
    db = suite.pytester.path / "report" / "convperf.sqlite"
    result.stdout.fnmatch_lines([f"convperf: results store sqlite:///{db} (schema v{schema.VERSION})"])
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
def test_a_store_needs_no_report_folder(suite: Suite, tmp_path: Path) -> None:
    # --convperf-store without --convperf-report was a usage error (issue 38.9): it is enough.
    result = suite.run(f"--convperf-store=sqlite:///{tmp_path / 's.sqlite'}")
    result.assert_outcomes(passed=2)
    assert [k.split("[")[0] for k, _, _ in _stored(tmp_path / "s.sqlite")] == ["test_a", "test_b"]


@needs_store
def test_without_a_report_folder_the_default_store_is_the_projects_own(suite: Suite) -> None:
    # No flag at all: the session's rows go to <rootdir>/.convperf/convperf.sqlite, which its own
    # .gitignore keeps out of git (as .pytest_cache); the next session appends. Off: no store.
    home = suite.pytester.path / ".convperf"
    result = suite.run()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"convperf: results store sqlite:///{home / 'convperf.sqlite'} (schema v*)"])
    assert (home / ".gitignore").read_text().splitlines()[-1] == "*"
    suite.run().assert_outcomes(passed=2)
    assert len(_stored(home / "convperf.sqlite")) == 4
    result = suite.run("--convperf-store=off", "--convperf-report=r")
    result.assert_outcomes(passed=2)
    assert (
        "results store" not in result.stdout.str()
        and not (suite.pytester.path / "r" / "convperf.sqlite").exists()
    )
    assert len(_stored(home / "convperf.sqlite")) == 4


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
            "convperf: results store off (SQLAlchemy is not installed: pip install SQLAlchemy, or install"
            " pytest-convperf with its dependencies); history.jsonl as before"
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
    # No report folder (the default store would be .convperf/): the session runs, says it once.
    result = suite.pytester.runpytest_subprocess(*suite.plugin_args, *args)
    result.assert_outcomes(passed=2)
    assert result.stdout.str().count("results store off (SQLAlchemy is not installed") == 1
    assert not (suite.pytester.path / ".convperf").exists()


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


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return str(request.getfixturevalue("pg_url"))


def _keys(url: str) -> list[str]:
    from pytest_convperf.resultsdb import db

    engine = db.engine_for(url)
    try:
        return sorted(str(r["key"]).split("[")[0] for r in db.read_records(engine, columns=("key",)))
    finally:
        engine.dispose()


@needs_store
def test_a_pending_record_the_store_refuses_costs_no_later_night(suite: Suite, store_url: str) -> None:
    # Records a failed write left: one with a 900-character id (PostgreSQL's VARCHAR(800) refused
    # it, and the retry failed every later night with the night's own records: issue 37.3) and one
    # over the store's bound. The first is stored, the second refused by name; tonight's records
    # and the other pending one are stored, and the pending file is gone (no night retries it).
    from pytest_convperf.resultsdb import db

    report = suite.pytester.path / "report"
    report.mkdir()
    base = {"when": "2026-01-01T00:00:00+00:00", "machine": MACHINE, "module": "m", "verdict": "PASS"}
    long_id, huge = "test_long@" + "x" * 890, "test_huge@" + "y" * db.MAX_KEY_BYTES
    pending = [dict(base, key="test_old@p"), dict(base, key=long_id), dict(base, key=huge)]
    (report / "store.pending.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pending))
    result = suite.run("--convperf-report=report", f"--convperf-store={store_url}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "note: results store: 3 record(s) a failed write had left in * stored",
            f"note: results store * refused one record, the others stored: m::test_huge@yyy*"
            f"its key is {len(huge)} bytes, over the store's {db.MAX_KEY_BYTES}*",
        ]
    )
    assert _keys(store_url) == sorted(["test_a", "test_b", "test_old@p", long_id])
    assert not (report / "store.pending.jsonl").exists()
    suite.run("--convperf-report=report", f"--convperf-store={store_url}").assert_outcomes(passed=2)
    assert len(_keys(store_url)) == 6


# Records, when the store's write starts, which of the built-in reports are on disk already.
SEE_REPORTS_AT_STORE_WRITE = """
import json
from pathlib import Path

from pytest_convperf.resultsdb import db

_write = db.write


def _seeing(engine, records, **kw):
    report = Path("report")
    seen = {name: (report / name).exists() for name in ("history.jsonl", "report.md", "rows.json")}
    Path("seen.json").write_text(json.dumps(seen))
    return _write(engine, records, **kw)


def pytest_configure(config):
    db.write = _seeing


def pytest_unconfigure(config):
    db.write = _write
"""


@needs_store
def test_the_local_reports_are_written_before_the_store(suite: Suite) -> None:
    # A locked or slow store kept history.jsonl, report.md and rows.json waiting (58 s), and a
    # kill in that wait left only the journal (issue 37.5): they are on disk before the store write.
    suite.pytester.makeconftest(SEE_REPORTS_AT_STORE_WRITE)
    db = suite.pytester.path / "store.sqlite"
    suite.run("--convperf-report=report", f"--convperf-store=sqlite:///{db}").assert_outcomes(passed=2)
    seen = json.loads((suite.pytester.path / "seen.json").read_text())
    assert seen == {"history.jsonl": True, "report.md": True, "rows.json": True}
    assert len(_stored(db)) == 2


READERS = (
    ["dashboard", "{url}", "--out", "{out}"],
    ["history", "{url}", "--no-plot"],
    ["export", "--format", "bmf", "{url}", "-o", "{out}/bmf.json"],
)


def _read(url: str, out: Path) -> list[tuple[int, str]]:
    """Each read-only command on ``url``: (exit code, stderr)."""
    import contextlib
    import io

    done = []
    for argv in READERS:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main([a.format(url=url, out=out) for a in argv])
        done.append((code, err.getvalue()))
    return done


@needs_store
def test_a_read_only_command_never_creates_a_store(tmp_path: Path) -> None:
    # A mistyped store path: dashboard exited 0 with an empty page and created an empty database
    # there (issue 38.7). Each reader now says in one line that there is no store, and creates none.
    path = tmp_path / "mistyped.sqlite"
    for code, err in _read(f"sqlite:///{path}", tmp_path / "site"):
        assert code == 2, err
        assert "does not exist, and a read-only command never creates a store" in err
        assert len(err.strip().splitlines()) == 1, err
    assert not path.exists() and not list(tmp_path.glob("mistyped*"))


def _old_store(url: str) -> None:
    """A store at schema 1 (as the first release made it) with a few nights of one check."""
    from pytest_convperf.resultsdb import db, schema

    engine = db.engine_for(url)
    with engine.begin() as conn:
        schema.migrate(conn, target=1)
    records = [
        {
            "when": f"2026-01-0{i}T00:00:00+00:00",
            "machine": "box",
            "module": "m",
            "key": "test_a@p",
            "commit": f"c{i}",
            "verdict": "PASS",
            "time_ratio": 0.5,
            "ln_ratio": -0.693,
        }
        for i in range(1, 4)
    ]
    db.write(engine, records, source="t")
    engine.dispose()


def _version(url: str) -> int:
    from pytest_convperf.resultsdb import db, schema

    engine = db.engine_for(url)
    with engine.connect() as conn:
        version = schema.version_of(conn)
    engine.dispose()
    return version


@needs_store
def test_reading_a_store_never_migrates_it(store_url: str, tmp_path: Path) -> None:
    # dashboard, export and history migrated the store before reading it (issue 37.6): reading
    # wrote. An older store is read as it is and left at its schema.
    _old_store(store_url)
    for code, err in _read(store_url, tmp_path / "site"):
        assert code == 0, err
    assert _version(store_url) == 1
    assert json.loads((tmp_path / "site" / "bmf.json").read_text())


@needs_store
def test_a_store_on_a_read_only_mount_can_be_read(suite: Suite, tmp_path: Path) -> None:
    # A store a session wrote (WAL journal), on a read-only mount: every reader failed
    # ("attempt to write a readonly database") as it migrated first (issue 37.6).
    import shutil
    import subprocess
    import sys

    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    suite.run(f"--convperf-report={src}").assert_outcomes(passed=2)
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind -o ro {src} {mnt} && ! touch {mnt}/x"],
        capture_output=True,
        check=False,
    )
    if shutil.which("unshare") is None or probe.returncode != 0:
        pytest.skip(f"no read-only bind mount here (needs unshare -m as root): {probe.stderr[:200]!r}")
    url = f"sqlite:///{mnt / 'convperf.sqlite'}"
    for argv in READERS:
        command = " ".join(a.format(url=url, out=tmp_path / "site") for a in argv)
        script = f"mount --bind -o ro {src} {mnt} && exec {sys.executable} -m pytest_convperf {command}"
        proc = subprocess.run(
            ["unshare", "-m", "sh", "-c", script],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert proc.returncode == 0, (argv[0], proc.stderr[-600:])
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "bmf.json").is_file()


@needs_store
def test_store_import_refuses_one_record_by_name_and_stores_the_others(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 900-character id stopped `store import` into PostgreSQL with a traceback, nothing stored
    # (issue 37.3). It is stored; an id over the store's bound is refused by name (exit 1).
    from pytest_convperf.resultsdb import db

    base = {"when": "2026-01-01T00:00:00+00:00", "machine": "box", "module": "m", "verdict": "PASS"}
    long_id, huge = "test_long@" + "x" * 890, "test_huge@" + "y" * db.MAX_KEY_BYTES
    lines = [dict(base, key=k, commit=f"c{i}") for i, k in enumerate(["test_a@p", long_id, huge, "test_b@p"])]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main(["store", "import", str(tmp_path), "--store", store_url]) == 1
    err = capsys.readouterr().err
    assert "refused m::test_huge@yyy" in err and f"its key is {len(huge)} bytes" in err
    assert (
        "store import: 3 of 4 records new in " in err and "1 refused (named above), the others stored" in err
    )
    assert _keys(store_url) == sorted(["test_a@p", "test_b@p", long_id])
