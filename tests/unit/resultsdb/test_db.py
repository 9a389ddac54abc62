"""The results store (issue 27.1): one interface, SQLite and PostgreSQL; schema migrations; clear
errors for a store that cannot be used; concurrent writers lose nothing.

PostgreSQL tests use ``$CONVPERF_TEST_POSTGRES_URL`` (``.ci/run`` starts a throwaway cluster and
sets it; ``.ci/postgres.sh start DIR`` does it by hand) and skip, saying so, without it.
"""

from __future__ import annotations

import multiprocessing
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

sa = pytest.importorskip(
    "sqlalchemy",
    reason="the store needs SQLAlchemy (absent after pip install --no-deps): pip install SQLAlchemy",
)

from pytest_convperf.resultsdb import db, schema  # noqa: E402


def record(i: int, *, key: str = "test_x@p", when: str | None = None, machine: str = "box") -> dict[str, Any]:
    return {
        "schema": "convperf-history/1",
        "when": when or f"2026-01-01T00:00:{i % 60:02d}+00:00#{i}",
        "commit": f"c{i}",
        "machine": machine,
        "module": "test_mod",
        "key": key,
        "verdict": "PASS",
        "time_ratio": 0.5,
        "ln_ratio": -0.693,
        "ratio_ci": [0.49, 0.51],
        "noise": 0.01,
        "timing": {"mode": "warm"},
        "kernels": [{"name": "k", "calls": 1.0, "share": 1.0}],
    }


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return str(request.getfixturevalue("pg_url"))


def test_records_round_trip_and_an_import_adds_nothing_twice(url: str) -> None:
    engine, versions = db.open_store(url)
    assert versions == (0, schema.VERSION)
    session_id = uuid.uuid4().hex
    records = [dict(record(i), session_id=session_id) for i in range(5)]  # as a session writes them
    assert db.write(engine, records, source="t", session_id=session_id).new == 5
    assert db.write(engine, records, source="again").new == 0  # same digests: nothing new
    back = db.read_records(
        engine, columns=("key", "commit", "ln_ratio", "ci_low", "noise", "timing_mode", "record")
    )
    assert [r["commit"] for r in back] == [f"c{i}" for i in range(5)]
    assert back[0]["ci_low"] == 0.49 and back[0]["noise"] == 0.01 and back[0]["timing_mode"] == "warm"
    assert back[0]["record"]["kernels"] == [{"name": "k", "calls": 1.0, "share": 1.0}]
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(schema.runs)).scalar_one() == 1
    engine.dispose()


def test_two_sessions_with_equal_results_in_one_second_are_both_stored(url: str) -> None:
    # Two sessions of one machine and commit, finished in the same second (``when`` has whole
    # seconds) with the same ratios: their records differ only by the session. Both are stored,
    # as two runs, and an import of both sessions' history lines adds nothing.
    one_second = [record(i, when="2026-01-01T00:00:00+00:00") for i in range(3)]
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    engine, _ = db.open_store(url)
    assert db.write(engine, one_second, source="t", session_id=first).new == 3
    assert db.write(engine, one_second, source="t", session_id=second).new == 3
    assert db.count(engine) == 6
    history = [dict(rec, session_id=s) for s in (first, second) for rec in one_second]
    assert db.write(engine, history, source="history.jsonl").new == 0
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(schema.runs)).scalar_one() == 2
    engine.dispose()


def test_an_import_of_a_report_folder_whose_session_wrote_live_adds_nothing(url: str) -> None:
    # The session writes its records live with ratio_ci, noise and kernels; its history.jsonl lines
    # lack them (other digests), and ``store import`` of that folder stored every row twice.
    session_id = uuid.uuid4().hex
    live = [dict(record(i, key=f"test_{i}@p"), session_id=session_id) for i in range(3)]
    history = [{k: v for k, v in rec.items() if k not in ("ratio_ci", "noise", "kernels")} for rec in live]
    engine, _ = db.open_store(url)
    assert db.write(engine, live, source="session", session_id=session_id).new == 3
    assert db.write(engine, history, source="history.jsonl").new == 0
    assert db.count(engine) == 3
    other = uuid.uuid4().hex  # another session's equal lines are its own run
    assert db.write(engine, [dict(rec, session_id=other) for rec in history], source="history.jsonl").new == 3
    assert db.count(engine) == 6
    engine.dispose()


def test_a_nan_in_a_record_is_stored(url: str) -> None:
    engine, _ = db.open_store(url)
    rec = dict(record(1), se=float("nan"), us={"candidate": float("inf")})
    assert db.write(engine, [rec], source="t").new == 1
    (back,) = db.read_records(engine, columns=("se", "record"))
    assert back["se"] is None and back["record"]["us"] == {"candidate": "inf"}
    engine.dispose()


def test_an_older_store_is_migrated_in_order_and_a_newer_one_refused(url: str) -> None:
    # Schema 3 (TEXT columns) came after this test was written: the store at schema 1 now climbs
    # to VERSION, and "newer" is VERSION + 1 (the premise, migrations in order, is unchanged).
    engine = db.engine_for(url)
    with engine.begin() as conn:
        assert schema.migrate(conn, target=1) == (0, 1)
    with engine.connect() as conn:
        assert "convperf_results_series" not in {
            i["name"] for i in sa.inspect(conn).get_indexes("convperf_results")
        }
    engine.dispose()
    engine, versions = db.open_store(url)
    assert versions == (1, schema.VERSION)
    with engine.connect() as conn:
        names = {i["name"] for i in sa.inspect(conn).get_indexes("convperf_results")}
        assert {"convperf_results_series", "convperf_results_when"} <= names
    with engine.begin() as conn:
        conn.execute(sa.update(schema.schema_table).values(version=schema.VERSION + 1))
    engine.dispose()
    with pytest.raises(
        db.StoreUnavailable,
        match=rf"schema version {schema.VERSION + 1} is newer than .*upgrade pytest-convperf",
    ):
        db.open_store(url)


LONG_ID = "test_conv@" + "x" * 890  # a 900-character parametrize id (issue 37.3)


def _lengths(conn: sa.Connection) -> dict[str, int | None]:
    return {
        c["name"]: getattr(c["type"], "length", None)
        for c in sa.inspect(conn).get_columns("convperf_results")
    }


def test_a_schema_2_store_takes_a_900_character_id_after_its_migration(url: str) -> None:
    # Schema 1 created VARCHAR(800) keys, which PostgreSQL enforces: one such id failed the whole
    # night (DataError, 0 rows). Migration 3 makes the text columns TEXT in place.
    engine = db.engine_for(url)
    with engine.begin() as conn:
        assert schema.migrate(conn, target=2) == (0, 2)
    with engine.connect() as conn:
        assert _lengths(conn)["key"] == 800 and _lengths(conn)["check_id"] == 1000
    engine.dispose()
    engine, versions = db.open_store(url)
    assert versions == (2, schema.VERSION)
    with engine.connect() as conn:
        lengths = _lengths(conn)
    if engine.dialect.name == "postgresql":  # SQLite keeps the declared VARCHAR(n), never enforced
        assert lengths["key"] is None and lengths["check_id"] is None and lengths["machine"] is None
    done = db.write(engine, [record(1, key=LONG_ID), record(2)], source="t", session_id=uuid.uuid4().hex)
    assert done == db.Written(2)
    assert [r["key"] for r in db.read_records(engine, columns=("key",))] == [LONG_ID, "test_x@p"]
    engine.dispose()


def test_one_bad_record_is_refused_by_name_and_costs_no_other(url: str) -> None:
    # A 900-character id (stored), a test file name that is not UTF-8 (a lone surrogate: stored,
    # escaped), a NUL, and an id over the store's bound (refused by name): every other record of
    # the night is stored, in this write and the next.
    engine, _ = db.open_store(url)
    huge = "test_conv@" + "y" * (db.MAX_KEY_BYTES + 10)
    records = [
        record(1),
        record(2, key=LONG_ID),
        dict(record(3, key="test_q@p"), module="test_\udcff_mod"),
        record(4, key="test_nul\x00@p"),
        record(5, key=huge),
        record(6, key="test_z@p"),
    ]
    done = db.write(engine, records, source="t", session_id=uuid.uuid4().hex)
    assert done.new == 5
    (refused,) = done.refused
    assert (
        refused.check.startswith("test_mod::test_conv@yyyy")
        and f"({len(huge) + 10} characters)" in refused.check
    )
    assert f"its key is {len(huge)} bytes, over the store's {db.MAX_KEY_BYTES}" in refused.why
    assert "\n" not in refused.line() and len(refused.line()) < 400
    back = db.read_records(engine, columns=("check_id", "key", "record"))
    assert sorted(r["key"] for r in back) == sorted(
        ["test_x@p", LONG_ID, "test_q@p", "test_nul\\x00@p", "test_z@p"]
    )
    assert "test_\\udcff_mod::test_q@p" in {r["check_id"] for r in back}
    later = db.write(engine, [record(7, key="test_later@p")], source="t", session_id=uuid.uuid4().hex)
    assert later == db.Written(1)
    engine.dispose()


def test_a_value_the_engine_refuses_costs_no_other_record(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever slips past the checks above (here: no bound, and a value the driver cannot bind),
    # the engine's refusal of one row is that row's alone: its savepoint is rolled back, the
    # chunk is retried row by row, and the transaction keeps the others.
    monkeypatch.setattr(db, "_text", lambda value: value if isinstance(value, str) else str(value))
    engine, _ = db.open_store(url)
    bad = dict(record(2, key="test_bad@p"), module="test_\udcff")
    done = db.write(engine, [record(1), bad, record(3, key="test_ok@p")], source="t", session_id="s1")
    assert done.new == 2
    (refused,) = done.refused
    assert refused.check.startswith("test_\\udcff::test_bad@p") and "the store refused it" in refused.why
    assert sorted(r["key"] for r in db.read_records(engine, columns=("key",))) == ["test_ok@p", "test_x@p"]
    engine.dispose()


def test_an_unreachable_postgresql_names_the_url_without_its_password_and_the_fix(tmp_path: Path) -> None:
    url = f"postgresql://bob:s3cret@/convperf?host={tmp_path}"  # no server on that socket
    with pytest.raises(db.StoreUnavailable) as info:
        db.open_store(url)
    message = str(info.value)
    assert "s3cret" not in message and "bob:***@" in message
    assert "start the database or fix host, port" in message and "\n" not in message


def test_a_sqlite_store_in_a_missing_folder_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(db.StoreUnavailable, match=r"create the file's folder"):
        db.open_store(f"sqlite:///{tmp_path / 'nowhere' / 's.sqlite'}")


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("not a url", "not a database URL"),
        ("mysql://h/db", "mysql is not a supported store"),
        ("sqlite://", "a store must be a file"),
    ],
)
def test_a_url_of_no_supported_kind_is_one_clear_line(url: str, match: str) -> None:
    with pytest.raises(db.StoreUnavailable, match=match):
        db.engine_for(url)


WRITERS, ROWS = 8, 50


def _writer(url: str, n: int, start: float) -> None:
    """One runner: ROWS sessions of one record each, all writers released at once."""
    time.sleep(max(0.0, start - time.time()))
    engine, _ = db.open_store(url)  # every writer also migrates: the empty store is created once
    for i in range(ROWS):
        db.write(
            engine, [record(i, key=f"w{n}", when=f"t{n}-{i}")], source=f"w{n}", session_id=uuid.uuid4().hex
        )
    engine.dispose()


def test_eight_concurrent_writers_lose_nothing(url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    start = time.time() + 3.0  # after every process has started and imported SQLAlchemy
    procs = [ctx.Process(target=_writer, args=(url, n, start)) for n in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    engine = db.engine_for(url)
    assert db.count(engine) == WRITERS * ROWS
    keys = [r["key"] for r in db.read_records(engine, columns=("key",))]
    assert {k: keys.count(k) for k in set(keys)} == {f"w{n}": ROWS for n in range(WRITERS)}
    engine.dispose()


def _in_thread(call: Any, limit_s: float) -> tuple[float, BaseException | None]:
    """(seconds, what ``call`` raised) when it ends within ``limit_s``; fails the test otherwise
    (the daemon thread is left to end when the test releases what it waits for)."""
    import threading

    box: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            box.append(None)
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(limit_s)
    assert box, f"still waiting after {limit_s} s, with no message"
    return time.monotonic() - start, box[0]


def test_a_held_migration_lock_is_a_bounded_wait_that_names_its_holder(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another connection held the advisory lock: the session hung with no output until killed
    # at 120 s (issue 37.4). Now it gives up after MIGRATION_LOCK_WAIT_S, naming the holder.
    monkeypatch.setattr(schema, "MIGRATION_LOCK_WAIT_S", 1.0)
    holder = sa.create_engine(
        sa.make_url(pg_url).set(drivername="postgresql+psycopg"),
        connect_args={"application_name": "stuck-runner"},
    )
    with holder.connect() as conn:
        pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": schema._PG_LOCK})
        try:
            seconds, error = _in_thread(lambda: db.open_store(pg_url), 30)
        finally:
            conn.execute(sa.text("SELECT pg_advisory_unlock_all()"))
    holder.dispose()
    assert isinstance(error, db.StoreUnavailable), error
    message = str(error)
    assert "waited 1 s for the migration lock" in message and f"pid {pid} 'stuck-runner'" in message
    assert "\n" not in message and seconds < 15
    engine, _ = db.open_store(pg_url)  # released: the store opens
    engine.dispose()


def test_a_server_that_never_answers_is_a_bounded_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    # A TCP listener that accepts and never speaks held a session 134 s (libpq waits forever by
    # default): now the connect timeout ends it, and the message says that is what it waited for.
    import socket

    pytest.importorskip("psycopg", reason="PostgreSQL's driver: pip install '.[store]'")
    monkeypatch.setattr(db, "CONNECT_TIMEOUT_S", 2)  # libpq's smallest
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        seconds, error = _in_thread(lambda: db.open_store(f"postgresql://u@127.0.0.1:{port}/db"), 30)
    assert isinstance(error, db.StoreUnavailable), error
    assert "did not answer within the connect timeout (2 s)" in str(error) and seconds < 15


def test_a_file_that_is_not_a_database_gets_the_fix_that_matches(tmp_path: Path) -> None:
    # "file is not a database" was followed by "create the file's folder and make it writable"
    # (issue 37.13): the folder exists and is writable; the file is something else.
    path = tmp_path / "notes.sqlite"
    path.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(db.StoreUnavailable) as info:
        db.open_store(f"sqlite:///{path}")
    message = str(info.value)
    assert "file is not a database" in message and "is not an SQLite database" in message
    assert "create the file's folder" not in message
    with pytest.raises(db.StoreUnavailable, match="is not an SQLite database"):
        db.open_reader(f"sqlite:///{path}")
