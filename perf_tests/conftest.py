"""Fixtures of the convperf suite: the candidate for the device in use (others may append).

On CUDA the depthwise candidate is our kernel (``kernels.depthwise.ops.forward``); on a CPU it is
the same algorithm in PyTorch ops (``kernels.depthwise.reference.forward``), compared with
PyTorch's CPU conv. Either way the reference is ``F.conv2d`` on that device.

On a CUDA run every kernel family is built once here, in the main process (the xdist controller),
before any test or worker starts: workers then load the finished library instead of each racing
to build it (the plugin package stays generic; this suite's kernels are this suite's business).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from perf_tests.device_kind import collection_device_kind
from pytest_convperf import DeviceInfo

Candidate = Callable[..., torch.Tensor]


def depthwise_candidate(device_kind: str) -> Candidate:
    """``ops.forward`` on CUDA (built and loaded here, once), ``reference.forward`` on a CPU; their
    planted twins (``kernels._controls.planted``) when ``CONVPERF_PLANTED_SLOWDOWN`` (or the window's
    hard-wired switch) asks for the planted slowdown."""
    from kernels._controls import planted

    if device_kind == "cuda":
        from kernels.depthwise import ops

        ops.ensure_loaded()
        return planted.candidate(ops.forward)
    from kernels.depthwise import reference

    return planted.candidate(reference.forward)


def prebuild_kernels(config: pytest.Config) -> list[str]:
    """Build every family on a CUDA run, in the main process only; return the failures' messages.

    A failure does not stop the run: the tests of that family fail with the same compiler errors,
    and the other families still run.
    """
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has built already
        return []
    if collection_device_kind(config) != "cuda":
        return []
    from kernels import _build

    failures = []
    for family in _build.families():
        try:
            _build.ensure_built(_build.make_spec(family))
        except _build.KernelBuildError as exc:
            failures.append(f"{family}: {exc}")
    return failures


CPU_MAIN_KEY = pytest.StashKey["cpu_main.CpuMainJob"]()


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """The plain main job on a CPU without baselines (``perf_tests/cpu_main.py``): record its
    selection in a fresh process before this session starts, and judge this session against it.

    Here, before ``pytest_configure``, the plugin's config is not built yet: pointing
    ``--convperf-baselines`` at the recording is all it takes (an initial conftest's hook)."""
    from perf_tests import cpu_main

    job = cpu_main.plan(config)
    if job is None:
        return None
    config.stash[CPU_MAIN_KEY] = job
    returncode = cpu_main.record(job, config)
    if not cpu_main.usable(returncode):
        cpu_main.cleanup(job)
        print(f"convperf CPU main job: the recording process exited {returncode} (above); stopping")
        return returncode
    config.option.convperf_baselines = str(job.scratch)
    return None


def pytest_configure(config: pytest.Config) -> None:
    for failure in prebuild_kernels(config):
        config.issue_config_time_warning(pytest.PytestWarning(f"kernel prebuild failed: {failure}"), 2)


def pytest_unconfigure(config: pytest.Config) -> None:
    from perf_tests import cpu_main

    cpu_main.cleanup(config.stash.get(CPU_MAIN_KEY, None))


def pytest_report_header(config: pytest.Config) -> list[str]:
    from perf_tests import cpu_main

    job = config.stash.get(CPU_MAIN_KEY, None)
    return cpu_main.header(job) if job is not None else []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from perf_tests import cpu_main

    job = config.stash.get(CPU_MAIN_KEY, None)
    if job is None:
        return
    kept, deselected = cpu_main.select(items, job)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture
def dw_candidate(convperf_device: DeviceInfo) -> Candidate:
    """The depthwise candidate for the device in use (see :func:`depthwise_candidate`)."""
    return depthwise_candidate(convperf_device.kind)
