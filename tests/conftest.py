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


# ---- the tiers (issue 38.11) ------------------------------------------------------------------
# README's test command (a bare ``pytest``: the ini's testpaths) runs the fast tier, under 10 minutes
# on a quiet 2-core box; these slow tiers run in ``.ci/run``'s second step (``pytest --tier=slow``),
# and whenever they are named (``pytest tests/kernels``). Every test still runs in CI.
SLOW_TIERS: dict[str, str] = {
    "tests/kernels/": "the kernel emulator, sanitizers, SASS and builds",
    "tests/integration/test_ab.py": "A/B in git worktrees with pytest subprocesses",
    "tests/integration/test_false_alarm.py": "real CPU timing, sessions in fresh processes",
    "tests/integration/test_cpu_main_job.py": "the CPU main job end to end (two sessions)",
    # The fast tier's slowest files (measured: 441 of its 1,064 s at load 2-3), issue 38.11:
    "tests/integration/test_calibrate.py": "calibrate's K sessions in subprocesses",
    "tests/integration/test_faults.py": "hung and crashing checks: time limits, killed processes",
    "tests/integration/test_cliffs.py": "cliff search: find, shrink, pin, re-check, retire",
    "tests/integration/test_cpu_gateable.py": "real CPU timing: record, calibrate, PASS and FAIL",
    "tests/integration/test_cheats.py": "real CPU timing of the four cheats",
    "tests/integration/test_night.py": "the night's verdict over whole sessions",
    "tests/integration/test_fresh_confirm.py": "FAILs confirmed in fresh pytest processes",
    "tests/integration/test_baselines_xdist.py": "updates through pytest-xdist workers",
    "tests/ci/test_readme_example.py": "README's example run from a temporary folder",
}
TIERS = ("fast", "slow", "all")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=TIERS,
        default=None,
        help="this repository's test tiers: fast (a bare pytest's default), slow (.ci/run's second step: "
        + "; ".join(f"{path} {why}" for path, why in SLOW_TIERS.items())
        + "), all (the default when paths are named)",
    )


def slow_tier(nodeid: str) -> bool:
    return any(nodeid.startswith(path) for path in SLOW_TIERS)


def chosen_tier(config: pytest.Config) -> str:
    tier = config.getoption("tier")
    if tier is not None:
        return str(tier)
    return "fast" if config.args_source == pytest.Config.ArgsSource.TESTPATHS else "all"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = chosen_tier(config)
    if tier == "all":
        return
    keep = [item for item in items if slow_tier(item.nodeid) == (tier == "slow")]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> str | None:
    tier = chosen_tier(config)
    if tier == "fast":
        return (
            "tier fast: the slow tiers (" + ", ".join(SLOW_TIERS) + ") are deselected; "
            "pytest --tier=slow runs them (.ci/run's second step), pytest --tier=all everything"
        )
    return f"tier {tier}" if tier == "slow" else None
