"""The results store's tables and their ordered migrations.

Two tables: ``convperf_runs`` (one per session that wrote, or per run an import found) and
``convperf_results`` (one per check per run: the columns history, the dashboard and the exports
filter and plot on, and ``record``, the whole record as JSON). ``convperf_schema`` holds the
version. :func:`migrate` brings any store up to :data:`VERSION` inside the caller's transaction,
under a lock (PostgreSQL: a transaction advisory lock; SQLite: the ``BEGIN IMMEDIATE`` of
:mod:`pytest_convperf.resultsdb.db`), so the first sessions of many runners, starting together on an
empty database, create it once.

Why not Alembic: two tables, migrations that run at every session start on every runner under
the lock above, and no migration environment (``env.py``, ini, a versions folder in the package
data) to ship; an ordered list of functions with a version row is all of it. A released migration
is never edited: a later change is a new function appended to :data:`MIGRATIONS`.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

metadata = sa.MetaData()

schema_table = sa.Table(
    "convperf_schema",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
)

# Text columns are TEXT: a test id, a module path or a machine slug has no length of its own, and
# PostgreSQL enforced the VARCHAR(n) of schema 1 (a 900-character parametrize id failed the whole
# night's write). The lengths schema 1 created are kept below (``_V1_LENGTHS``): migration 1 still
# creates exactly them, and migration 3 lifts them. What the store bounds is checked per record
# (``db.record_problem``), so one record over it is refused by name, never the others.
runs = sa.Table(
    "convperf_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    # What makes a run one run: a session's own uuid, or an import's (when, machine, commit).
    sa.Column("ident", sa.Text, nullable=False, unique=True),
    sa.Column("when", sa.Text, nullable=False),
    sa.Column("commit", sa.Text),
    sa.Column("machine", sa.Text),
    sa.Column("source", sa.Text, nullable=False),
)

results = sa.Table(
    "convperf_results",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("convperf_runs.id"), nullable=False),
    # sha256 of the record: an import of the same history.jsonl twice adds nothing.
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("check_id", sa.Text, nullable=False),
    sa.Column("module", sa.Text),
    sa.Column("key", sa.Text, nullable=False),
    sa.Column("machine", sa.Text, nullable=False),
    sa.Column("device_kind", sa.Text),
    sa.Column("commit", sa.Text),
    sa.Column("when", sa.Text, nullable=False),
    sa.Column("verdict", sa.Text),
    sa.Column("timing_mode", sa.Text),
    sa.Column("time_ratio", sa.Float),
    sa.Column("ln_ratio", sa.Float),
    sa.Column("ci_low", sa.Float),
    sa.Column("ci_high", sa.Float),
    sa.Column("se", sa.Float),
    sa.Column("noise", sa.Float),
    sa.Column("n_rounds", sa.Integer),
    sa.Column("record", sa.JSON, nullable=False),
)

# The VARCHAR lengths schema 1 created (released: never edited; migration 3 lifts them).
_V1_LENGTHS: dict[str, dict[str, int]] = {
    "convperf_runs": {"ident": 200, "when": 64, "commit": 64, "machine": 200, "source": 400},
    "convperf_results": {
        "check_id": 1000,
        "module": 400,
        "key": 800,
        "machine": 200,
        "device_kind": 32,
        "commit": 64,
        "when": 64,
        "verdict": 32,
        "timing_mode": 32,
    },
}

HISTORY_INDEX = sa.Index("convperf_results_series", results.c.machine, results.c.key, results.c.when)
WHEN_INDEX = sa.Index("convperf_results_when", results.c.when)


def _v1_tables(conn: sa.Connection) -> None:
    # CREATE TABLE alone: the indexes bound to these tables are migration 2's. The columns as
    # released, VARCHAR(n) included (a copy of each table with schema 1's types).
    released = sa.MetaData()
    for table in (runs, results):
        copy = table.to_metadata(released)
        for name, length in _V1_LENGTHS[table.name].items():
            copy.c[name].type = sa.String(length)
        conn.execute(sa.schema.CreateTable(copy))


def _v2_history_indexes(conn: sa.Connection) -> None:
    # A check's series (history, the dashboard) and the last night, without a full scan.
    HISTORY_INDEX.create(conn, checkfirst=True)
    WHEN_INDEX.create(conn, checkfirst=True)


def _v3_text_columns(conn: sa.Connection) -> None:
    # PostgreSQL enforces VARCHAR(n); VARCHAR to TEXT is binary-coercible there (no table rewrite,
    # no index rebuild). SQLite never enforced a length (its VARCHAR(n) is TEXT): nothing to do.
    if conn.dialect.name != "postgresql":
        return
    for table, lengths in _V1_LENGTHS.items():
        columns = ", ".join(f'ALTER COLUMN "{name}" TYPE TEXT' for name in lengths)
        conn.execute(sa.text(f"ALTER TABLE {table} {columns}"))


MIGRATIONS: tuple[Callable[[sa.Connection], None], ...] = (_v1_tables, _v2_history_indexes, _v3_text_columns)
VERSION = len(MIGRATIONS)
# The oldest schema the readers (history, dashboard, export) can read as it is: they read columns
# schema 1 has, and migrations 2 and 3 change no column's meaning. A reader never migrates.
READABLE_FROM = 1
# The migration's transaction advisory lock: any constant that other applications of the database
# do not use.
_PG_LOCK = 0x636F6E76  # "conv"
# How long a session waits for that lock. A migration takes milliseconds; a holder past this is a
# session stuck inside its migration (or another program's connection), and waiting silently for
# it hung a session until it was killed (issue 37.4).
MIGRATION_LOCK_WAIT_S = 60.0


class SchemaTooNew(RuntimeError):
    """The store was migrated by a newer plugin than this one."""


class MigrationLocked(RuntimeError):
    """Another connection held the migration lock for all of :data:`MIGRATION_LOCK_WAIT_S`."""


def _pg_migration_lock(conn: sa.Connection) -> None:
    """Take the migration lock, trying every 0.2 s for at most :data:`MIGRATION_LOCK_WAIT_S`; then
    :class:`MigrationLocked` naming the connection that holds it."""
    import time

    deadline = time.monotonic() + MIGRATION_LOCK_WAIT_S
    while not conn.execute(sa.text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": _PG_LOCK}).scalar():
        if time.monotonic() > deadline:
            raise MigrationLocked(
                f"waited {MIGRATION_LOCK_WAIT_S:.0f} s for the migration lock (advisory lock {_PG_LOCK}), "
                f"held by {_pg_lock_holder(conn)}; end that connection (SELECT pg_terminate_backend(pid)) "
                "or wait for it, then start again"
            )
        time.sleep(0.2)


def _pg_lock_holder(conn: sa.Connection) -> str:
    """Who holds the migration lock, as far as this user may see: pid, application, client."""
    row = conn.execute(
        sa.text(
            "SELECT a.pid, a.application_name, a.client_addr, a.state FROM pg_locks l "
            "LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
            "AND l.objid = :k AND l.granted LIMIT 1"
        ),
        {"k": _PG_LOCK},
    ).first()
    if row is None or row.pid is None:
        return "another connection"
    app = f" {row.application_name!r}" if row.application_name else ""
    client = f" from {row.client_addr}" if row.client_addr else ""
    return f"pid {row.pid}{app}{client} ({row.state})"


def version_of(conn: sa.Connection) -> int:
    """The store's schema version (0: an empty database)."""
    if not sa.inspect(conn).has_table(schema_table.name):
        return 0
    value = conn.execute(sa.select(schema_table.c.version).where(schema_table.c.id == 1)).scalar()
    return int(value or 0)


def migrate(conn: sa.Connection, *, target: int = VERSION) -> tuple[int, int]:
    """Apply the migrations the store lacks, up to ``target``, in the caller's transaction;
    returns (version before, version after). A store newer than this code raises
    :class:`SchemaTooNew` (writing to it could lose columns the newer plugin fills); a migration lock
    held past :data:`MIGRATION_LOCK_WAIT_S`, :class:`MigrationLocked`."""
    if conn.dialect.name == "postgresql":
        _pg_migration_lock(conn)
    metadata.create_all(conn, tables=[schema_table], checkfirst=True)
    before = version_of(conn)
    if before > VERSION:
        raise SchemaTooNew(
            f"schema version {before} is newer than this pytest-convperf's {VERSION}; "
            "upgrade pytest-convperf on this runner"
        )
    for step in MIGRATIONS[before:target]:
        step(conn)
    after = max(before, target)
    if after != before:
        if before == 0:
            conn.execute(sa.insert(schema_table).values(id=1, version=after))
        else:
            conn.execute(sa.update(schema_table).where(schema_table.c.id == 1).values(version=after))
    return before, after
