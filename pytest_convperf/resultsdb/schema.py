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

runs = sa.Table(
    "convperf_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    # What makes a run one run: a session's own uuid, or an import's (when, machine, commit).
    sa.Column("ident", sa.String(200), nullable=False, unique=True),
    sa.Column("when", sa.String(64), nullable=False),
    sa.Column("commit", sa.String(64)),
    sa.Column("machine", sa.String(200)),
    sa.Column("source", sa.String(400), nullable=False),
)

results = sa.Table(
    "convperf_results",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("convperf_runs.id"), nullable=False),
    # sha256 of the record: an import of the same history.jsonl twice adds nothing.
    sa.Column("digest", sa.String(64), nullable=False, unique=True),
    sa.Column("check_id", sa.String(1000), nullable=False),
    sa.Column("module", sa.String(400)),
    sa.Column("key", sa.String(800), nullable=False),
    sa.Column("machine", sa.String(200), nullable=False),
    sa.Column("device_kind", sa.String(32)),
    sa.Column("commit", sa.String(64)),
    sa.Column("when", sa.String(64), nullable=False),
    sa.Column("verdict", sa.String(32)),
    sa.Column("timing_mode", sa.String(32)),
    sa.Column("time_ratio", sa.Float),
    sa.Column("ln_ratio", sa.Float),
    sa.Column("ci_low", sa.Float),
    sa.Column("ci_high", sa.Float),
    sa.Column("se", sa.Float),
    sa.Column("noise", sa.Float),
    sa.Column("n_rounds", sa.Integer),
    sa.Column("record", sa.JSON, nullable=False),
)

HISTORY_INDEX = sa.Index("convperf_results_series", results.c.machine, results.c.key, results.c.when)
WHEN_INDEX = sa.Index("convperf_results_when", results.c.when)


def _v1_tables(conn: sa.Connection) -> None:
    # CREATE TABLE alone: the indexes bound to these tables are migration 2's.
    for table in (runs, results):
        conn.execute(sa.schema.CreateTable(table))


def _v2_history_indexes(conn: sa.Connection) -> None:
    # A check's series (history, the dashboard) and the last night, without a full scan.
    HISTORY_INDEX.create(conn, checkfirst=True)
    WHEN_INDEX.create(conn, checkfirst=True)


MIGRATIONS: tuple[Callable[[sa.Connection], None], ...] = (_v1_tables, _v2_history_indexes)
VERSION = len(MIGRATIONS)
# pg_advisory_xact_lock's key: any constant that other applications of the database do not use.
_PG_LOCK = 0x636F6E76  # "conv"


class SchemaTooNew(RuntimeError):
    """The store was migrated by a newer plugin than this one."""


def version_of(conn: sa.Connection) -> int:
    """The store's schema version (0: an empty database)."""
    if not sa.inspect(conn).has_table(schema_table.name):
        return 0
    value = conn.execute(sa.select(schema_table.c.version).where(schema_table.c.id == 1)).scalar()
    return int(value or 0)


def migrate(conn: sa.Connection, *, target: int = VERSION) -> tuple[int, int]:
    """Apply the migrations the store lacks, up to ``target``, in the caller's transaction;
    returns (version before, version after). A store newer than this code raises
    :class:`SchemaTooNew` (writing to it could lose columns the newer plugin fills)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK})
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
