"""Shared helpers for the plugin's own tests (run without a GPU)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from importlib.metadata import entry_points

import pytest

# pytester's in-process sessions drop modules first imported inside them; re-importing torch
# (or torch._inductor, which the profiler loads lazily) after that crashes. Import them once here.
import torch
import torch._inductor  # noqa: F401

# The same for SQLAlchemy (and its PostgreSQL dialect), which every session loads for the results store
# (re-imported, its compiled parts fail: "'InternalTraversal' object is not callable").
try:
    import sqlalchemy.dialects.postgresql  # noqa: F401  # re-imported: "already registered" warnings

    import pytest_convperf.resultsdb.db  # noqa: F401
except ImportError:  # installed with --no-deps (the GPU machine): no SQLAlchemy, the store is off
    pass


def _plugin_installed() -> bool:
    return any(ep.name == "convperf" for ep in entry_points(group="pytest11"))


# Inner pytester sessions load the plugin through its entry point when the package is installed
# (as README and CI install it); from a bare checkout they need it named explicitly.
PLUGIN_ARGS: tuple[str, ...] = () if _plugin_installed() else ("-p", "pytest_convperf.plugin")


@pytest.fixture
def plugin_args() -> tuple[str, ...]:
    """Extra args that make an inner pytester session load the convperf plugin."""
    return PLUGIN_ARGS


@pytest.fixture
def cpu_plugin_args(plugin_args: tuple[str, ...]) -> tuple[str, ...]:
    """``plugin_args`` plus ``--convperf-device=cpu``: an inner session that tests the CPU path.

    The default device is ``auto``, which picks CUDA on a GPU machine; a test about the CPU timer,
    the RSS memory source or the CPU's timer mode must say so or it tests the GPU there.
    """
    return (*plugin_args, "--convperf-device=cpu")


PG_ENV = "CONVPERF_TEST_POSTGRES_URL"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh database per test on the PostgreSQL cluster of ``$CONVPERF_TEST_POSTGRES_URL``
    (``.ci/run`` starts one: ``.ci/postgres.sh start DIR``); the test skips, saying so, without it."""
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"no PostgreSQL: set ${PG_ENV} (.ci/run starts one: .ci/postgres.sh start DIR)")
    import sqlalchemy as sa

    base = sa.make_url(url)
    name = f"convperf_t{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base.set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield base.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()
