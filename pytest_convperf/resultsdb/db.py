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
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import sqlalchemy as sa
from sqlalchemy import event

from pytest_convperf.resultsdb.schema import migrate, results, runs

BUSY_TIMEOUT_S = 120
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


def engine_for(url: str) -> sa.Engine:
    """An engine for ``url``; ``postgresql://`` uses psycopg 3. A URL of another kind raises
    :class:`StoreUnavailable`."""
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
        return sa.create_engine(parsed, pool_pre_ping=True)
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise StoreUnavailable(
                f"--convperf-store={url}: a store must be a file other processes can open; "
                "use sqlite:///PATH (three slashes, then the path)"
            )
        engine = sa.create_engine(parsed, connect_args={"timeout": BUSY_TIMEOUT_S})
        _immediate_transactions(engine)
        return engine
    raise StoreUnavailable(
        f"--convperf-store={shown(url)}: {backend} is not a supported store; use sqlite:///PATH or "
        "postgresql://USER@HOST/DB"
    )


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


def fix_for(url: str) -> str:
    """What to do about a store that cannot be reached, by engine."""
    if sa.make_url(url).get_backend_name() == "postgresql":
        return (
            "start the database or fix host, port, user, password or database name in the URL "
            "(psql URL checks it), or drop --convperf-store to use the report folder's SQLite file"
        )
    return "create the file's folder and make it writable, or give another path: sqlite:///PATH"


def open_store(url: str) -> tuple[sa.Engine, tuple[int, int]]:
    """Connect and migrate; (engine, (schema version before, after)). Any failure is a
    :class:`StoreUnavailable` naming the URL and the fix: a session checks this at its start, so a
    store that cannot be reached never costs a night that was measured."""
    from pytest_convperf.resultsdb.schema import SchemaTooNew

    engine = engine_for(url)
    try:
        with engine.begin() as conn:
            versions = migrate(conn)
    except SchemaTooNew as exc:
        engine.dispose()
        raise StoreUnavailable(f"results store {shown(url)}: {exc}") from None
    except Exception as exc:
        engine.dispose()
        why = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:300]
        raise StoreUnavailable(
            f"results store {shown(url)} cannot be used ({type(exc).__name__}: {why}); {fix_for(url)}"
        ) from None
    return engine, versions


def digest(record: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def _number(value: Any) -> float | None:
    """A finite number, else None (a NaN column would sort and average wrongly)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _columns(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record's indexed columns (the record itself is stored whole beside them)."""
    ci = record.get("ratio_ci")
    low, high = (ci[0], ci[1]) if isinstance(ci, (list, tuple)) and len(ci) == 2 else (None, None)
    timing = record.get("timing")
    module = record.get("module")
    n_rounds = record.get("n_rounds")
    return {
        "check_id": f"{module}::{record['key']}" if module else str(record["key"]),
        "module": module,
        "key": str(record["key"]),
        "machine": str(record.get("machine") or "unknown"),
        "device_kind": record.get("device_kind"),
        "commit": record.get("commit"),
        "when": str(record.get("when") or ""),
        "verdict": record.get("verdict"),
        "timing_mode": timing.get("mode") if isinstance(timing, Mapping) else None,
        "time_ratio": _number(record.get("time_ratio")),
        "ln_ratio": _number(record.get("ln_ratio")),
        "ci_low": _number(low),
        "ci_high": _number(high),
        "se": _number(record.get("se")),
        "noise": _number(record.get("noise")),
        "n_rounds": n_rounds if isinstance(n_rounds, int) and not isinstance(n_rounds, bool) else None,
        # JSON has no NaN: a non-finite number in a record is stored as its text.
        "record": _plain(record),
    }


def _plain(value: Any) -> Any:
    """``value`` as strict JSON: a non-finite float becomes its text (JSON has no NaN, and
    PostgreSQL's json type refuses one), anything else not JSON its ``str``."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


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
            ident=ident,
            when=str(first.get("when") or ""),
            commit=first.get("commit"),
            machine=first.get("machine"),
            source=source[:400],
        )
    )
    return int(conn.execute(sa.select(runs.c.id).where(runs.c.ident == ident)).scalar_one())


def write(
    engine: sa.Engine, records: Sequence[Mapping[str, Any]], *, source: str, session_id: str | None = None
) -> int:
    """Append ``records`` in one transaction; returns how many were new (a record already stored,
    the same digest, or a check its session's run already holds, is left out). A session's records
    are one run, each stamped with the ``session_id`` (so equal results of two sessions are two
    records); an import's are grouped
    into runs by their own ``session_id``, or by (when, machine, commit) in records older than it."""
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
    with engine.begin() as conn:
        for ident, group in groups.items():
            values = {digest(rec): _columns(rec) for rec in group}
            stored = _stored(conn, list(values))
            checks = _session_checks(conn, ident)
            fresh = [
                dict(v, digest=d)
                for d, v in values.items()
                if d not in stored and v["check_id"] not in checks
            ]
            if not fresh:  # an import of records already stored adds no empty run either
                continue
            run_id = _run_id(conn, ident, group[0], source)
            for i in range(0, len(fresh), CHUNK):
                conn.execute(_insert(conn, results), [dict(v, run_id=run_id) for v in fresh[i : i + CHUNK]])
            new += len(fresh)
    return new


def _session_checks(conn: sa.Connection, ident: str) -> set[str]:
    """The checks a session's run already holds. A session writes its records live with more fields
    than its ``history.jsonl`` lines (``ratio_ci``, ``noise``, ``kernels``), so an import of its
    report folder has other digests: within one session a check is one record, whatever its fields.
    An import's runs (no session id) are matched by digest alone."""
    if not ident.startswith("session:"):
        return set()
    query = (
        sa.select(results.c.check_id).join(runs, results.c.run_id == runs.c.id).where(runs.c.ident == ident)
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
