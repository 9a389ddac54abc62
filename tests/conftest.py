"""Shared helpers for the plugin's own tests (run without a GPU)."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

# pytester's in-process sessions drop modules first imported inside them; re-importing torch
# (or torch._inductor, which the profiler loads lazily) after that crashes. Import them once here.
import torch
import torch._inductor  # noqa: F401

# The same for SQLAlchemy, which every session with a report folder loads for the results store
# (re-imported, its compiled parts fail: "'InternalTraversal' object is not callable").
try:
    import pytest_convperf.resultsdb.db  # noqa: F401
except ImportError:  # installed without the [store] extra: the store is off
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
