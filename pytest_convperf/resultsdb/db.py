"""One interface, two engines: open a store by URL, write a session's records in one transaction,
read them back.

``sqlite:///PATH`` (embedded; many processes of one host) and ``postgresql://...`` (many runners;
the driver is psycopg 3, ``postgresql+psycopg``). A record is a ``history.jsonl`` record
(``report_files.history_records``) with optional ``ratio_ci``, ``noise``, ``kernels`` and
``nodeid``: what a session writes and what ``store import`` reads from old report folders alike.
A session's records carry its ``session_id`` (one uuid per session, in ``history.jsonl`` too): a
record's digest is its identity, and two sessions with equal results in one second (the record's
``when``) on one machine and commit would otherwise be one record, the second session's rows lost.

SQLite: every transaction starts with ``BEGIN IMMEDIATE`` (the write lock up front, so two writers
never both hold a read lock and deadlock on the upgrade) and waits up to ``BUSY_TIMEOUT_S`` for
it; the journal is WAL, so readers (the dashboard) do not block writers.

Every wait is bounded and its error names what it waited for: PostgreSQL's connect
(``CONNECT_TIMEOUT_S``, a listener that never answers), lock waits (``LOCK_TIMEOUT_S``), the
migration lock (``schema.MIGRATION_LOCK_WAIT_S``); SQLite's write lock (``BUSY_TIMEOUT_S``).
Readers (:func:`open_reader`: history, dashboard, export) open the store read-only and never
migrate nor create it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import quote, unquote

import sqlalchemy as sa
from sqlalchemy import event

from pytest_convperf.resultsdb.schema import READABLE_FROM, VERSION, migrate, results, runs, version_of

BUSY_TIMEOUT_S = 120
# PostgreSQL: a server that accepts the TCP connection and never answers held a session 134 s
# (libpq's default is to wait forever); a lock another transaction holds, at most this long.
CONNECT_TIMEOUT_S = 10
LOCK_TIMEOUT_S = 60
# The most UTF-8 bytes of a record's key, and of its machine: PostgreSQL's B-tree index holds an
# entry of at most about 2,700 bytes, and the series index is (machine, key, when). A record over
# it is refused by name (its rows stay in history.jsonl); the others are stored.
MAX_KEY_BYTES = 2000
MAX_MACHINE_BYTES = 300
# Rows per INSERT statement and per "which of these are stored already" query.
CHUNK = 500


class StoreUnavailable(RuntimeError):
    """The store's URL cannot be used: the message names the URL (password hidden) and the fix."""


def shown(url: str) -> str:
    """The URL as messages may print it: the password hidden, the query readable (a socket folder)."""
    try:
        return unquote(sa.make_url(url).render_as_string(hide_password=True))
    except Exception:
        return url.split("@")[-1] if "@" in url else url


def engine_for(url: str, *, read_only: bool = False) -> sa.Engine:
    """An engine for ``url``; ``postgresql://`` uses psycopg 3. A URL of another kind raises
    :class:`StoreUnavailable`. ``read_only``: PostgreSQL's transactions are read-only, SQLite's file
    is opened ``mode=ro`` (never created; a missing file is a :class:`StoreUnavailable`)."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise StoreUnavailable(
            f"--convperf-store={url!r} is not a database URL; use sqlite:///PATH or postgresql://USER@HOST/DB"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        # The URL's own connect_timeout (?connect_timeout=N) wins.
        args = {} if "connect_timeout" in parsed.query else {"connect_timeout": CONNECT_TIMEOUT_S}
        engine = sa.create_engine(parsed, pool_pre_ping=True, connect_args=args)
        _pg_session_settings(engine, read_only=read_only)
        return engine
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise StoreUnavailable(
                f"--convperf-store={url}: a store must be a file other processes can open; "
                "use sqlite:///PATH (three slashes, then the path)"
            )
        if read_only:
            return _sqlite_reader(url, Path(parsed.database))
        engine = sa.create_engine(parsed, connect_args={"timeout": BUSY_TIMEOUT_S})
        _immediate_transactions(engine)
        return engine
    raise StoreUnavailable(
        f"--convperf-store={shown(url)}: {backend} is not a supported store; use sqlite:///PATH or "
        "postgresql://USER@HOST/DB"
    )


def _pg_session_settings(engine: sa.Engine, *, read_only: bool) -> None:
    """Each connection waits for a lock at most ``LOCK_TIMEOUT_S``; a reader's are read-only."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_S}s'")
            if read_only:
                cursor.execute("SET default_transaction_read_only = on")
        dbapi_connection.commit()  # a SET in a transaction rolled back would be undone


def _sqlite_reader(url: str, path: Path) -> sa.Engine:
    """A read-only engine on an existing SQLite file: ``mode=ro`` never creates the file nor writes
    it; on a read-only folder without the WAL's ``-shm`` file, ``immutable=1`` (nothing can write
    there, and SQLite could not open the WAL index it would otherwise need)."""
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise StoreUnavailable(
            f"results store {shown(url)}: {path} {what}, and a read-only command never creates a store; "
            "check the path (sqlite:///ABSOLUTE/PATH has four slashes), or write one with "
            "pytest --convperf --convperf-report=DIR (DIR/convperf.sqlite)"
        )
    base = f"file:{quote(str(path.resolve()))}?mode=ro"

    def connect() -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(base, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return conn
        except sqlite3.OperationalError as exc:
            if "unable to open" not in str(exc) or _writable(path.parent):
                raise
        return sqlite3.connect(base + "&immutable=1", uri=True, check_same_thread=False)

    return sa.create_engine("sqlite://", creator=connect)


def _writable(folder: Path) -> bool:
    import os

    return os.access(folder, os.W_OK) and not os.statvfs(folder).f_flag & os.ST_RDONLY


def _immediate_transactions(engine: sa.Engine) -> None:
    """SQLite: pysqlite's own transaction handling off, ``BEGIN IMMEDIATE`` ours, WAL journal."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
        _wal(cursor)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _wal(cursor: Any) -> None:
    """Switch the file to WAL once (the mode persists in the file). SQLite does not run the busy
    handler for this switch: writers opening a new file together get "database is locked" at once
    (seen with 8 writers on a loaded 2-core box), so the switch is retried up to the busy timeout."""
    import sqlite3
    import time

    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def fix_for(url: str, exc: BaseException | None = None) -> str:
    """What to do about a store that cannot be used, by engine and by what the error says."""
    why = str(getattr(exc, "orig", None) or exc or "").lower()
    if sa.make_url(url).get_backend_name() == "postgresql":
        if "timeout expired" in why or "timed out" in why:
            return (
                f"the server did not answer within the connect timeout ({CONNECT_TIMEOUT_S} s): check host "
                "and port in the URL (psql URL checks it), or drop --convperf-store to use the SQLite file"
            )
        if "lock timeout" in why:
            return f"another connection held a lock on the store's tables for {LOCK_TIMEOUT_S} s; try again"
        return (
            "start the database or fix host, port, user, password or database name in the URL "
            "(psql URL checks it), or drop --convperf-store to use the report folder's SQLite file"
        )
    if "not a database" in why or "malformed" in why:
        return "that file is not an SQLite database: give a new path (sqlite:///PATH) or move the file away"
    if "locked" in why:
        return f"another process held the store's write lock for {BUSY_TIMEOUT_S} s: try again when it ends"
    if "readonly" in why or "read-only" in why:
        return "the file or its folder is read-only: make both writable, or give another path: sqlite:///PATH"
    if "disk is full" in why or "no space" in why:
        return "the disk is full: free space there, or give another path: sqlite:///PATH"
    return "create the file's folder and make it writable, or give another path: sqlite:///PATH"


def failure(exc: BaseException) -> str:
    """An error's first line, bounded, as messages print it."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def open_store(url: str) -> tuple[sa.Engine, tuple[int, int]]:
    """Connect and migrate; (engine, (schema version before, after)). Any failure is a
    :class:`StoreUnavailable` naming the URL and the fix: a session checks this at its start, so a
    store that cannot be reached never costs a night that was measured."""
    from pytest_convperf.resultsdb.schema import MigrationLocked, SchemaTooNew

    engine = engine_for(url)
    try:
        with engine.begin() as conn:
            versions = migrate(conn)
    except (SchemaTooNew, MigrationLocked) as exc:
        engine.dispose()
        raise StoreUnavailable(f"results store {shown(url)}: {exc}") from None
    except Exception as exc:
        engine.dispose()
        raise StoreUnavailable(
            f"results store {shown(url)} cannot be used ({failure(exc)}); {fix_for(url, exc)}"
        ) from None
    return engine, versions


def open_reader(url: str) -> sa.Engine:
    """A read-only engine on an existing store (history, dashboard, export): never created, never
    migrated, nothing written (a read-only mount can be read). A missing store, one that is not a
    results store, or a schema this code cannot read is a :class:`StoreUnavailable`."""
    engine = engine_for(url, read_only=True)
    try:
        with engine.connect() as conn:
            version = version_of(conn)
    except Exception as exc:
        engine.dispose()
        raise StoreUnavailable(
            f"results store {shown(url)} cannot be read ({failure(exc)}); {fix_for(url, exc)}"
        ) from None
    problem = None
    if version == 0:
        problem = (
            "holds no convperf results (no convperf_schema table): give the store that sessions write to"
        )
    elif version > VERSION:
        problem = (
            f"schema version {version} is newer than this pytest-convperf's {VERSION}; "
            "upgrade pytest-convperf"
        )
    elif version < READABLE_FROM:
        problem = (
            f"schema version {version} is older than this reader reads ({READABLE_FROM}); a session or "
            "store import with write access migrates it"
        )
    if problem is not None:
        engine.dispose()
        raise StoreUnavailable(f"results store {shown(url)}: {problem}")
    return engine


def digest(record: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Refused:
    """One record the store refused: its check (bounded, as messages print it) and why."""

    check: str
    why: str

    def line(self) -> str:
        return f"{self.check}: {self.why}"


@dataclasses.dataclass(frozen=True)
class Written:
    """What :func:`write` did: how many records were new, and those refused (the others stored)."""

    new: int
    refused: tuple[Refused, ...] = ()


def _number(value: Any) -> float | None:
    """A finite number, else None (a NaN column would sort and average wrongly)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _text(value: Any) -> str:
    """``value`` as text either engine stores: a lone surrogate (a test file name that is not
    UTF-8) backslash-escaped, as report files write it, and NUL (PostgreSQL's text refuses it)
    as ``\\x00``. Without it one such record failed the whole transaction, on SQLite too."""
    text = value if isinstance(value, str) else str(value)
    if text.isascii() and "\x00" not in text:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


class ResultColumns(TypedDict):
    """A record's row of ``results`` before its ``digest`` and ``run_id`` (:func:`_columns`)."""

    check_id: str
    module: str | None
    key: str
    machine: str
    device_kind: str | None
    commit: str | None
    when: str
    verdict: str | None
    timing_mode: str | None
    time_ratio: float | None
    ln_ratio: float | None
    ci_low: float | None
    ci_high: float | None
    se: float | None
    noise: float | None
    n_rounds: int | None
    record: object  # the whole record as strict JSON (:func:`_plain`)


def _columns(record: Mapping[str, Any]) -> ResultColumns:
    """A record's indexed columns (the record itself is stored whole beside them)."""
    ci = record.get("ratio_ci")
    low, high = (ci[0], ci[1]) if isinstance(ci, (list, tuple)) and len(ci) == 2 else (None, None)
    timing = record.get("timing")
    module = record.get("module")
    n_rounds = record.get("n_rounds")
    return ResultColumns(
        check_id=_text(f"{module}::{record['key']}" if module else record["key"]),
        module=_optional_text(module),
        key=_text(record["key"]),
        machine=_text(record.get("machine") or "unknown"),
        device_kind=_optional_text(record.get("device_kind")),
        commit=_optional_text(record.get("commit")),
        when=_text(record.get("when") or ""),
        verdict=_optional_text(record.get("verdict")),
        timing_mode=_optional_text(timing.get("mode")) if isinstance(timing, Mapping) else None,
        time_ratio=_number(record.get("time_ratio")),
        ln_ratio=_number(record.get("ln_ratio")),
        ci_low=_number(low),
        ci_high=_number(high),
        se=_number(record.get("se")),
        noise=_number(record.get("noise")),
        n_rounds=n_rounds if isinstance(n_rounds, int) and not isinstance(n_rounds, bool) else None,
        # JSON has no NaN: a non-finite number in a record is stored as its text.
        record=_plain(record),
    )


def _plain(value: Any) -> Any:
    """``value`` as strict JSON: a non-finite float becomes its text (JSON has no NaN, and
    PostgreSQL's json type refuses one), text as :func:`_text` stores it, anything else not JSON
    its ``str``."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {_text(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return _text(value)
    if value is None or isinstance(value, (int, float, bool)):
        return value
    return _text(value)


def named(check_id: str) -> str:
    """A check as messages print it: repr-escaped (no newline, no control character) and bounded."""
    text = ascii(check_id)[1:-1]
    return text if len(text) <= 160 else f"{text[:150]}... ({len(check_id)} characters)"


def record_problem(columns: Mapping[str, Any]) -> str | None:
    """Why the store refuses a record (its columns, :func:`_columns`), or None: a key or machine
    longer than PostgreSQL's index holds (checked on both engines, so a record is in both or
    neither)."""
    for name, most in (("key", MAX_KEY_BYTES), ("machine", MAX_MACHINE_BYTES)):
        size = len(str(columns[name]).encode("utf-8"))
        if size > most:
            return (
                f"its {name} is {size} bytes, over the store's {most}; shorten it "
                + ("(pytest.param(..., id=...))" if name == "key" else "(--convperf-machine)")
                + " - the record stays in history.jsonl"
            )
    return None


def _record_fault(exc: BaseException) -> bool:
    """Whether a failed INSERT was about its rows (a value the engine refuses), not the store (a
    dropped connection, a lock timeout, a full disk): only the first is refused record by record;
    the second fails the whole write, whose records are then kept for the next session."""
    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, (UnicodeError, ValueError, TypeError, OverflowError)):
        return True
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str):  # PostgreSQL: data exception, integrity, program limit (index size)
        return sqlstate[:2] in ("22", "23", "54")
    return isinstance(orig, (sqlite3.DataError, sqlite3.IntegrityError)) or "too big" in str(orig)


def _insert(conn: sa.Connection, table: sa.Table) -> Any:
    """INSERT .. ON CONFLICT DO NOTHING in either dialect (a concurrent import of the same file)."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing()
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table).on_conflict_do_nothing()


def _run_id(conn: sa.Connection, ident: str, first: Mapping[str, Any], source: str) -> int:
    conn.execute(
        _insert(conn, runs).values(
            ident=_text(ident),
            when=_text(first.get("when") or ""),
            commit=_optional_text(first.get("commit")),
            machine=_optional_text(first.get("machine")),
            source=_text(source[:400]),
        )
    )
    return int(conn.execute(sa.select(runs.c.id).where(runs.c.ident == _text(ident))).scalar_one())


def _insert_results(conn: sa.Connection, rows: Sequence[Mapping[str, object]]) -> tuple[int, list[Refused]]:
    """The rows in chunks, each under a savepoint; a chunk the engine refuses for its values is
    retried row by row, so one bad row is refused by name and costs no other (a failed statement
    otherwise aborts PostgreSQL's whole transaction). Returns (rows stored, rows refused)."""
    stored, refused = 0, []
    for i in range(0, len(rows), CHUNK):
        chunk = rows[i : i + CHUNK]
        try:
            with conn.begin_nested():
                conn.execute(_insert(conn, results), chunk)
            stored += len(chunk)
            continue
        except Exception as exc:
            if not _record_fault(exc):
                raise
        for row in chunk:
            try:
                with conn.begin_nested():
                    conn.execute(_insert(conn, results), [row])
                stored += 1
            except Exception as exc:
                if not _record_fault(exc):
                    raise
                refused.append(Refused(named(str(row["check_id"])), f"the store refused it ({failure(exc)})"))
    return stored, refused


def write(
    engine: sa.Engine, records: Sequence[Mapping[str, Any]], *, source: str, session_id: str | None = None
) -> Written:
    """Append ``records`` in one transaction; returns how many were new (a record already stored,
    the same digest, or a check its session's run already holds, is left out) and those refused,
    by name (:func:`record_problem`, or a value the engine refuses): a refused record costs no other.
    A session's records are one run, each stamped with the ``session_id`` (so equal results of two
    sessions are two records); an import's are grouped into runs by their own ``session_id``, or by
    (when, machine, commit) in records older than it. A failure of the store itself (connection,
    lock, disk) raises, and nothing of the write is kept."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for rec in records:
        if session_id and rec.get("session_id") != session_id:
            rec = {**rec, "session_id": session_id}
        run = rec.get("session_id")
        ident = (
            f"session:{run}"
            if run
            else "import:" + "|".join(str(rec.get(k)) for k in ("when", "machine", "commit"))
        )
        groups.setdefault(ident, []).append(rec)
    new = 0
    refused: list[Refused] = []
    with engine.begin() as conn:
        for ident, group in groups.items():
            values: dict[str, ResultColumns] = {}
            for rec in group:
                columns = _columns(rec)
                problem = record_problem(columns)
                if problem is None:
                    values[digest(rec)] = columns
                else:
                    refused.append(Refused(named(columns["check_id"]), problem))
            stored = _stored(conn, list(values))
            checks = _session_checks(conn, ident)
            fresh = [
                dict(v, digest=d)
                for d, v in values.items()
                if d not in stored and v["check_id"] not in checks
            ]
            if not fresh:  # an import of records already stored adds no empty run either
                continue
            with conn.begin_nested() as group_savepoint:
                run_id = _run_id(conn, ident, group[0], source)
                added, bad = _insert_results(conn, [dict(v, run_id=run_id) for v in fresh])
                if not added:  # every record refused: no empty run either
                    group_savepoint.rollback()
            new += added
            refused += bad
    return Written(new, tuple(refused))


def _session_checks(conn: sa.Connection, ident: str) -> set[str]:
    """The checks a session's run already holds. A session writes its records live with more fields
    than its ``history.jsonl`` lines (``ratio_ci``, ``noise``, ``kernels``), so an import of its
    report folder has other digests: within one session a check is one record, whatever its fields.
    An import's runs (no session id) are matched by digest alone."""
    if not ident.startswith("session:"):
        return set()
    query = (
        sa.select(results.c.check_id)
        .join(runs, results.c.run_id == runs.c.id)
        .where(runs.c.ident == _text(ident))
    )
    return set(conn.execute(query).scalars())


def _stored(conn: sa.Connection, digests: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for i in range(0, len(digests), CHUNK):
        chunk = digests[i : i + CHUNK]
        found.update(conn.execute(sa.select(results.c.digest).where(results.c.digest.in_(chunk))).scalars())
    return found


HISTORY_COLUMNS = ("machine", "key", "module", "when", "commit", "verdict", "ln_ratio")


def read_records(
    engine: sa.Engine, *, columns: Iterable[str] = HISTORY_COLUMNS, machine: str | None = None
) -> list[dict[str, Any]]:
    """The stored results as records (the named columns; ``record``: the whole record), oldest first."""
    cols = [results.c[name] for name in columns]
    query = sa.select(*cols).order_by(results.c.when, results.c.id)
    if machine is not None:
        query = query.where(results.c.machine == machine)
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]


def count(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(results)).scalar_one())
